"""A performance model of a training step, and a planner that ranks every layout of the ranks by it.

For a transformer (``layers`` blocks of width ``h``, MLP width ``f``, sequence ``s``, vocabulary ``V``) and a
layout ``dp x tp x pp`` with ``m`` micro-batches, one micro-batch of ``t = batch / (dp m) x s`` tokens costs on
pipeline stage ``k`` (:func:`stage_seconds`)::

    compute   layers/pp x (3 x layer_flops(t) / tp / rate + block overhead)   forward + backward = 3 forwards
              + on the first stage the embedding's overhead
              + on the last stage 3 x 2 t h V / tp / rate + head overhead      norm, head and loss
    tp comm   (4 x layers/pp + 1 on the first, + 4 on the last) all-reduces    f and g of each block, forward
              of t h values over tp                                            and backward; embedding; loss
    pp comm   2 transfers of t h values to a neighbour                         activation up, gradient down

The slowest stage paces the micro-batches and every other stage adds its turn while the pipeline fills and
drains: the step is ``(m - 1) x max_k c_k + sum_k c_k`` (``(m + pp - 1) x c`` for equal stages; the fill and
drain are the bubble), plus the optimizer's update and one all-reduce of the stage's gradients over ``dp``. Where
the ranks share fewer devices than there are ranks (``cores``: several ranks per CPU), the step lasts at least
all ranks' compute over the devices; a rank idle in the bubble or waiting on a collective leaves its device to
another rank's work.

What the model reads is measured (:class:`Rates`, :mod:`nbcoll.parallel.plan_costs`): the FLOP rate and the fixed
cost of a block's forward and backward (Python and kernel launches, which dominate small models) from timing a
block at the micro-batch sizes the layouts use, the embedding's and the head and loss's fixed costs, and the
optimizer's per block. Each collective costs the communicator's calibrated alpha-beta model
(:mod:`nbcoll.comm.tuner`) at its real size, whose fixed cost per call ``gamma`` gives way to ``call_latency``,
the fixed cost of one call measured where the ranks run, and, for an all-reduce, ``partner_wait``: on shared cores
a call that follows a layer's work also waits for its partner to get a core back, time that costs the step
nothing in a pipeline, whose other stages use the core meanwhile. :func:`~nbcoll.parallel.plan_costs.measure_costs`
(offered here too) times all of them on the ranks at once.

With ``long_sequences=True`` the layouts also split the sequence (:class:`Layout`'s ``cp``, ``sp``,
``recompute``): under cp a rank computes ``1 / cp`` of the tokens, attending over the whole sequence, and each
block passes k and v round the ring, ``cp - 1`` alpha-beta hops forward and ``cp`` backward
(:func:`ring_seconds`, the "cp comm" part), the gradients being averaged over ``dp x cp``; under sp each
all-reduce becomes an all-gather and a reduce-scatter of the same bytes; recomputation runs every block's forward
once more. Memory per rank (:mod:`nbcoll.parallel.plan_memory`) is the peak bytes of a step as
``nbcoll.memory.stats()`` counts them, exactly for cp = 1: the parameters, optimizer state and data-parallel
buckets of the rank's shard, and the largest of three moments of 1F1B (the first backward, a later forward, a
later backward), each the forwards of the micro-batches alive then (every array the engine keeps, by tp, sp and
recomputation), the pipeline's buffers, the gradients made so far and backward's temporaries; under cp, a
calibrated estimate.

Example::

    spec = ModelSpec(layers=4, hidden=64, seq_len=32, batch=16, heads=4, vocab=64)
    for p in plan(spec, ranks=4)[:3]:
        print(p.layout, f"{p.step_seconds * 1e3:.1f} ms", p.memory_bytes)
    print(explain(plan(spec, ranks=4)))
    fits = plan(spec, ranks=4, memory_limit=2_000_000, long_sequences=True)   # cp, sp and recomputation too
    print(explain(fits, memory_limit=2_000_000))
    rates = measure_costs(spec, comm, cores=2)   # collective, on the ranks of the run: every cost above, timed
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from nbcoll.comm import tuner

# Measuring the costs the model reads lives in its own module, and what it reads in another; offered here too.
from nbcoll.parallel.plan_costs import measure_call_latency as measure_call_latency
from nbcoll.parallel.plan_costs import measure_costs as measure_costs
from nbcoll.parallel.plan_costs import measure_rates as measure_rates
from nbcoll.parallel.plan_costs import token_range as token_range
from nbcoll.parallel.plan_memory import memory_bytes, stage_params
from nbcoll.parallel.plan_model import Layout as Layout
from nbcoll.parallel.plan_model import ModelSpec as ModelSpec
from nbcoll.parallel.plan_model import Rates as Rates
from nbcoll.parallel.plan_model import default_rates as default_rates
from nbcoll.parallel.plan_model import layouts as layouts


@dataclass
class Prediction:
    layout: Layout
    step_seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # compute, bubble, sharing, tp comm, pp comm, dp comm
    memory_bytes: int = 0


def all_reduce_seconds(nbytes: float, ranks: int, rates: Rates) -> float:
    if ranks == 1:
        return 0.0
    # A measured call latency is the whole fixed cost of a call where the ranks run: it replaces the model's gamma.
    link = dataclasses.replace(rates.link, gamma=rates.call_latency) if rates.call_latency else rates.link
    return tuner.estimate("all_reduce", "ring", int(nbytes), ranks, rates.chunk_bytes, link) + rates.partner_wait


def stage_seconds(spec: ModelSpec, layout: Layout, stage: int, rates: Rates) -> tuple[float, float, float]:
    """One micro-batch's forward and backward on pipeline stage ``stage``: (compute, tp comm, pp comm) seconds.

    Every block costs its FLOPs over tp at the measured rate plus the fixed ``block_overhead`` and four
    all-reduces over tp (f and g, forward and backward); the first stage adds the embedding (one all-reduce), the
    last the norm, head and loss (three all-reduces in the loss, one in the head's backward). Under cp a rank
    computes its ``1 / cp`` of the tokens, attending over the whole sequence (each block's ring hops are
    :func:`ring_seconds`); under sp each all-reduce is an all-gather and a
    reduce-scatter, which move the same bytes; recomputation runs every block's forward once more.
    """
    dp, tp, pp, m = layout.dp, layout.tp, layout.pp, layout.chunks
    tokens = spec.batch // (dp * m) * spec.seq_len // layout.cp
    per_stage = spec.layers // pp
    forwards = 4 if layout.recompute else 3  # forward + backward = 3 forwards; recomputation one more
    block = forwards * spec.layer_flops(tokens) / tp / rates.flops_per_second + rates.block_overhead
    compute = per_stage * (block + (rates.block_overhead / 3 if layout.recompute else 0.0))
    calls = 4 * per_stage
    if stage == 0:
        compute, calls = compute + rates.embed_overhead, calls + 1
    if stage == pp - 1:
        head_flops = 3 * 2.0 * tokens * spec.hidden * spec.vocab / tp
        compute, calls = compute + head_flops / rates.flops_per_second + rates.head_overhead, calls + 4
    tp_comm = calls * all_reduce_seconds(tokens * spec.hidden * spec.bytes_per_value, tp, rates)
    transfer = rates.link.alpha + rates.call_latency + tokens * spec.hidden * spec.bytes_per_value / rates.link.beta
    pp_comm = 2 * transfer if pp > 1 else 0.0  # the activation to the next stage, its gradient from it
    return compute, tp_comm, pp_comm


def ring_seconds(spec: ModelSpec, layout: Layout, rates: Rates) -> float:
    """One block's ring under cp, forward and backward: ``cp - 1`` hops of this rank's k and v blocks forward,
    ``cp - 1`` of k, v and their gradients backward and one taking the gradients home, each hop one alpha-beta
    transfer; and the fixed cost of the chunk pairs attended (``ring_overhead`` each): its own two chunks'
    three, then two at each of the other ``cp - 1`` steps (recomputation runs the forward's hops and pairs
    again)."""
    cp = layout.cp
    if cp == 1:
        return 0.0
    tokens = spec.batch // (layout.dp * layout.chunks) * spec.seq_len // cp
    block = tokens * spec.hidden // layout.tp * spec.bytes_per_value  # k or v of this rank's heads

    def hop(nbytes: int) -> float:
        return rates.link.alpha + rates.call_latency + nbytes / rates.link.beta

    forward = (cp - 1) * hop(2 * block)
    pairs = (3 + 2 * (cp - 1)) * rates.ring_overhead * (4 / 3 if layout.recompute else 1.0)
    return forward * (2 if layout.recompute else 1) + (cp - 1) * hop(4 * block) + hop(2 * block) + pairs


def predict(spec: ModelSpec, layout: Layout, rates: Rates) -> Prediction:
    """Step time and memory per rank of ``spec`` trained under ``layout``.

    With ``c_s`` the time of one micro-batch on stage ``s`` (:func:`stage_seconds`), the slowest stage paces the
    ``m`` micro-batches and every other stage adds its turn while the pipeline fills and drains::

        step = (m - 1) * max_s c_s + sum_s c_s  +  update  +  all-reduce of the gradients over dp

    which is ``(m + pp - 1) x c`` for equal stages. Where the ranks share fewer devices than there are ranks, the
    step lasts at least the work of all ranks over the devices.
    """
    dp, tp, pp, m = layout.dp, layout.tp, layout.pp, layout.chunks
    value = spec.bytes_per_value
    per_stage = spec.layers // pp
    # Tensor-parallel partners that wait for a core lose nothing when another stage's rank uses that core; only
    # without a pipeline, where every rank runs the same work in lockstep, do they all wait together.
    stage_rates = dataclasses.replace(rates, partner_wait=0.0) if pp > 1 else rates
    stages = [stage_seconds(spec, layout, s, stage_rates) for s in range(pp)]
    ring = per_stage * ring_seconds(spec, layout, rates)  # every stage's blocks pass k and v round the cp ring
    totals = [sum(c) + ring for c in stages]
    slowest = max(range(pp), key=lambda s: totals[s])
    compute, tp_comm, pp_comm = stages[slowest]
    fill_and_drain = sum(totals) - totals[slowest]
    update = per_stage * rates.update_overhead
    params = stage_params(spec, layout)
    dp_comm = all_reduce_seconds(params * value, dp * layout.cp, rates)  # the cp ranks are replicas too
    if pp > 1:
        dp_comm += rates.call_latency  # the loss, broadcast from the last stage once per step
    # Ranks that share fewer devices than there are ranks take turns: the step lasts at least every rank's
    # compute divided by the devices. Idle time in the bubble is then filled by other ranks' work.
    ranks = layout.ranks
    work = dp * tp * layout.cp * sum(m * c[0] + update for c in stages)
    shared = work / rates.cores if rates.cores and rates.cores < ranks else 0.0
    parts = {
        "compute": m * compute + update,
        "bubble": fill_and_drain,
        # A rank waiting on a collective or a neighbour leaves its core to another rank's work.
        "sharing": max(0.0, shared - m * (compute + tp_comm + pp_comm + ring) - update - fill_and_drain),
        "tp comm": m * tp_comm,
        "pp comm": m * pp_comm,
        "dp comm": dp_comm,
        "cp comm": m * ring,
    }
    return Prediction(layout, sum(parts.values()), parts, memory_bytes(spec, layout))


def plan(
    spec: ModelSpec,
    ranks: int,
    rates: Rates | None = None,
    memory_limit: int | None = None,
    long_sequences: bool = False,
) -> list[Prediction]:
    """Every layout's prediction, fastest first (those over ``memory_limit`` bytes per rank left out);
    ``long_sequences`` adds the layouts with cp, sp and recomputation (:func:`layouts`)."""
    if ranks < 1:
        raise ValueError(f"ranks: expected at least 1, got {ranks}")
    rates = rates or default_rates()
    predictions = [predict(spec, layout, rates) for layout in layouts(spec, ranks, long_sequences=long_sequences)]
    if memory_limit is not None:
        predictions = [p for p in predictions if p.memory_bytes <= memory_limit]
    if not predictions:
        raise ValueError(f"spec: no layout of {ranks} ranks divides this model and fits the memory limit")
    return sorted(predictions, key=lambda p: p.step_seconds)


def explain(predictions: list[Prediction], memory_limit: int | None = None) -> str:
    """Why the first layout beats the second: the parts of the step where they differ most; given the
    ``memory_limit`` the plan kept to, first what every layout that fits it shares (cp > 1, recomputation)."""
    fits = ""
    if memory_limit is not None:
        shared = [
            name
            for name, has in (
                ("cp > 1", lambda lay: lay.cp > 1),
                ("sp", lambda lay: lay.sp),
                ("recomputation", lambda lay: lay.recompute),
            )
            if all(has(p.layout) for p in predictions)
        ]
        only = f"only {' with '.join(shared)} fits" if shared else "these layouts fit"
        count = f"{len(predictions)} layout{'s' * (len(predictions) > 1)}"
        fits = f"{only} {memory_limit / 1e6:.1f} MB per rank ({count}); "
    if len(predictions) == 1:
        return f"{fits}{predictions[0].layout} is the only layout"
    best, second = predictions[0], predictions[1]
    gaps = sorted(best.parts, key=lambda k: second.parts[k] - best.parts[k], reverse=True)
    gaps = [k for k in gaps[:2] if second.parts[k] > best.parts[k]] or gaps[:1]
    saved = [f"{k} {1e3 * best.parts[k]:.2f} ms vs {1e3 * second.parts[k]:.2f} ms" for k in gaps]
    return fits + (
        f"{best.layout} wins ({1e3 * best.step_seconds:.2f} ms per step) over {second.layout} "
        f"({1e3 * second.step_seconds:.2f} ms): {'; '.join(saved)}"
    )


def format_plan(predictions: list[Prediction], top: int = 10) -> str:
    """The ranked layouts as a table, then why the best wins (a cp comm column where a layout has cp > 1)."""
    shown = predictions[:top]
    keys = ["compute", "bubble", "tp comm", "pp comm", "dp comm"]
    keys += ["cp comm"] if any(p.layout.cp > 1 for p in shown) else []
    width = max([24] + [len(str(p.layout)) + 2 for p in shown])
    lines = [f"{'layout':<{width}}{'step ms':>9}" + "".join(f"{k:>9}" for k in keys) + f"{'MiB':>8}"]
    for p in shown:
        parts = "".join(f"{1e3 * p.parts[k]:>9.2f}" for k in keys)
        lines.append(f"{str(p.layout):<{width}}{1e3 * p.step_seconds:>9.2f}{parts}{p.memory_bytes / 2**20:>8.2f}")
    return "\n".join(lines + ["", explain(predictions)])


__all__ = [
    "Layout",
    "ModelSpec",
    "Prediction",
    "Rates",
    "default_rates",
    "explain",
    "format_plan",
    "layouts",
    "plan",
    "predict",
    "ring_seconds",
    "stage_seconds",
]
