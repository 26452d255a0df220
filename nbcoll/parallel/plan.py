"""A performance model of a training step, and a planner that ranks every layout of the ranks by it.

For a transformer (``layers`` blocks of width ``h``, MLP width ``f``, sequence ``s``, vocabulary ``V``) and a
layout ``dp x tp x pp`` with ``m`` micro-batches, one micro-batch of ``t = batch / (dp m) x s`` tokens costs on
one pipeline stage::

    compute   layers/pp x (3 x layer_flops(t) / tp / rate + overhead)     forward + backward = 3 forwards
              + on the last stage 3 x 2 t h V / tp / rate                  the head
    tp comm   layers/pp x 4 all-reduces of t h values over tp              f and g, forward and backward
    pp comm   2 transfers of t h values to a neighbour                     activation up, gradient down

and the step is ``(m + pp - 1) x stage time`` (the ``pp - 1`` extra slots are the bubble) plus one all-reduce of
the stage's gradients over ``dp``. Where the ranks share fewer devices than there are ranks (``cores``: several
ranks per CPU), the step lasts at least all ranks' compute over the devices, and a bubble costs nothing while
another rank can use the device. ``rate`` (FLOP/s) and ``overhead`` (seconds per block forward and backward:
Python and kernel launches, which dominate small models) are measured by :func:`measure_rates`; each collective's
time is the communicator's calibrated cost model (:mod:`nbcoll.comm.tuner`), whose fixed cost per call
``gamma`` gives way to ``call_latency`` where that is measured where the ranks run (Python's share, and on a
shared CPU the wait for the peer to be scheduled: :func:`measure_call_latency`). Memory per rank counts the
parameters, gradients and optimizer state of the rank's shard, and the activations of the micro-batches in
flight (``min(m, pp)`` under 1F1B).

Example::

    spec = ModelSpec(layers=4, hidden=64, seq_len=32, batch=16, heads=4, vocab=64)
    for p in plan(spec, ranks=4)[:3]:
        print(p.layout, f"{p.step_seconds * 1e3:.1f} ms", p.memory_bytes)
    print(explain(plan(spec, ranks=4)))
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbcoll.comm import tuner


@dataclass(frozen=True)
class ModelSpec:
    """A transformer language model and its global batch.

    Example::

        ModelSpec(layers=4, hidden=64, seq_len=32, batch=16, heads=4, vocab=64, bytes_per_value=8)
    """

    layers: int
    hidden: int
    seq_len: int
    batch: int
    heads: int
    vocab: int
    mlp_ratio: float = 4.0
    bytes_per_value: int = 4
    optimizer_states: int = 1  # values of optimizer state per parameter: 1 for SGD with momentum, 2 for Adam

    @property
    def mlp(self) -> int:
        return int(round(self.mlp_ratio * self.hidden))

    def layer_flops(self, tokens: int) -> float:
        """Forward FLOPs of one block: q, k, v and out projections, the MLP, and attention over the sequence."""
        h, f = self.hidden, self.mlp
        return 2.0 * tokens * (4 * h * h + 2 * h * f) + 4.0 * tokens * self.seq_len * h

    def layer_params(self) -> int:
        h, f = self.hidden, self.mlp
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    chunks: int

    def __str__(self) -> str:
        return f"dp={self.dp} tp={self.tp} pp={self.pp} m={self.chunks}"


@dataclass(frozen=True)
class Rates:
    """What the hardware does: measured compute rate and per-block overhead, and the links' alpha-beta model."""

    flops_per_second: float
    block_overhead: float  # seconds per block forward + backward beyond its FLOPs
    link: tuner.LinkModel
    chunk_bytes: int = 1 << 20
    cores: int | None = None  # devices the ranks share (CPU cores here); None: one device per rank
    call_latency: float = 0.0  # seconds each collective or transfer call costs beyond the alpha-beta model


@dataclass
class Prediction:
    layout: Layout
    step_seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # compute, bubble, tp comm, pp comm, dp comm
    memory_bytes: int = 0


def all_reduce_seconds(nbytes: float, ranks: int, rates: Rates) -> float:
    if ranks == 1:
        return 0.0
    # A measured call latency is the whole fixed cost of a call where the ranks run: it replaces the model's gamma.
    link = dataclasses.replace(rates.link, gamma=rates.call_latency) if rates.call_latency else rates.link
    return tuner.estimate("all_reduce", "ring", int(nbytes), ranks, rates.chunk_bytes, link)


def predict(spec: ModelSpec, layout: Layout, rates: Rates) -> Prediction:
    """Step time and memory per rank of ``spec`` trained under ``layout``."""
    dp, tp, pp, m = layout.dp, layout.tp, layout.pp, layout.chunks
    tokens = spec.batch // (dp * m) * spec.seq_len
    value = spec.bytes_per_value
    per_stage = spec.layers // pp
    compute = per_stage * (3 * spec.layer_flops(tokens) / tp / rates.flops_per_second + rates.block_overhead)
    compute += 3 * 2.0 * tokens * spec.hidden * spec.vocab / tp / rates.flops_per_second / pp  # head, spread
    tp_comm = per_stage * 4 * all_reduce_seconds(tokens * spec.hidden * value, tp, rates)
    transfer = rates.link.alpha + rates.call_latency + tokens * spec.hidden * value / rates.link.beta
    pp_comm = 2 * transfer if pp > 1 else 0.0
    stage = compute + tp_comm + pp_comm
    params = per_stage * spec.layer_params() // tp + 2 * spec.vocab * spec.hidden // tp // pp
    dp_comm = all_reduce_seconds(params * value, dp, rates)
    # Ranks that share fewer devices than there are ranks take turns: the step lasts at least every rank's
    # compute divided by the devices. Idle time in the bubble is then filled by other ranks' work.
    ranks = dp * tp * pp
    shared = ranks * m * compute / rates.cores if rates.cores and rates.cores < ranks else 0.0
    bubble = (pp - 1) * stage
    parts = {
        "compute": m * compute,
        "bubble": bubble,
        "sharing": max(0.0, shared - m * compute - bubble),
        "tp comm": m * tp_comm,
        "pp comm": m * pp_comm,
        "dp comm": dp_comm,
    }
    h, f, heads = spec.hidden, spec.mlp, spec.heads
    saved_per_token = 4 * h + (4 * h + 2 * f) / tp + 2 * heads * spec.seq_len / tp  # values kept for backward
    in_flight = min(m, pp)
    activations = in_flight * per_stage * tokens * saved_per_token * value
    memory = params * value * (2 + spec.optimizer_states) + activations
    return Prediction(layout, sum(parts.values()), parts, int(memory))


def layouts(spec: ModelSpec, ranks: int, max_chunks: int = 8) -> list[Layout]:
    """Every layout of ``ranks`` that divides the model: heads, MLP and vocabulary by tp, layers by pp, and the
    batch by dp x micro-batches."""
    found = []
    for tp in range(1, ranks + 1):
        for pp in range(1, ranks // tp + 1):
            if ranks % (tp * pp):
                continue
            dp = ranks // (tp * pp)
            if spec.heads % tp or spec.mlp % tp or spec.vocab % tp or spec.layers % pp or spec.batch % dp:
                continue
            for m in (1, 2, 4, 8, 16):
                if m <= max_chunks and (spec.batch // dp) % m == 0 and (pp > 1 or m == 1):
                    found.append(Layout(dp, tp, pp, m))
    return found


def plan(spec: ModelSpec, ranks: int, rates: Rates | None = None, memory_limit: int | None = None) -> list[Prediction]:
    """Every layout's prediction, fastest first (those over ``memory_limit`` bytes per rank left out)."""
    if ranks < 1:
        raise ValueError(f"ranks: expected at least 1, got {ranks}")
    rates = rates or default_rates()
    predictions = [predict(spec, layout, rates) for layout in layouts(spec, ranks)]
    if memory_limit is not None:
        predictions = [p for p in predictions if p.memory_bytes <= memory_limit]
    if not predictions:
        raise ValueError(f"spec: no layout of {ranks} ranks divides this model and fits the memory limit")
    return sorted(predictions, key=lambda p: p.step_seconds)


def explain(predictions: list[Prediction]) -> str:
    """Why the first layout beats the second: the parts of the step where they differ most."""
    if len(predictions) == 1:
        return f"{predictions[0].layout} is the only layout"
    best, second = predictions[0], predictions[1]
    gaps = sorted(best.parts, key=lambda k: second.parts[k] - best.parts[k], reverse=True)
    gaps = [k for k in gaps[:2] if second.parts[k] > best.parts[k]] or gaps[:1]
    saved = [f"{k} {1e3 * best.parts[k]:.2f} ms vs {1e3 * second.parts[k]:.2f} ms" for k in gaps]
    return (
        f"{best.layout} wins ({1e3 * best.step_seconds:.2f} ms per step) over {second.layout} "
        f"({1e3 * second.step_seconds:.2f} ms): {'; '.join(saved)}"
    )


def default_rates(cores: int | None = None) -> Rates:
    """Rates without measuring: a NumPy-on-CPU FLOP rate and overhead, and the calibrated (or default) link."""
    link = tuner.load_models().get("ipc") or tuner.LinkModel(40e-6, 2e9)
    return Rates(flops_per_second=2e9, block_overhead=4e-3, link=link, cores=cores)


def measure_rates(spec: ModelSpec, repeats: int = 3, cores: int | None = None) -> Rates:
    """Time one transformer block's forward and backward at two token counts in this process; the line
    through them gives the FLOP rate (slope) and the per-block overhead (intercept)."""
    import nbcoll
    from nbcoll import nn

    dtype = np.float64 if spec.bytes_per_value == 8 else np.float32
    block = nn.TransformerBlock(spec.hidden, spec.heads, mlp_ratio=spec.mlp_ratio, causal=True, dtype=dtype)
    points = []
    for batch in (1, 8):
        x = nbcoll.tensor(np.random.default_rng(0).standard_normal((batch, spec.seq_len, spec.hidden)), dtype=dtype)
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            block(x).sum().backward()
            times.append(time.perf_counter() - start)
        points.append((3 * spec.layer_flops(batch * spec.seq_len), float(np.median(times[1:]))))
    (f1, t1), (f2, t2) = points
    seconds_per_flop = max((t2 - t1) / (f2 - f1), 1e-13)
    overhead = max(t1 - f1 * seconds_per_flop, 0.0)
    return Rates(1.0 / seconds_per_flop, overhead, default_rates().link, cores=cores)


def measure_call_latency(comm: Any, repeats: int = 20) -> float:
    """Collective: the median seconds of an 8-byte all-reduce between pairs of ranks, all pairs at once (as
    tensor-parallel partners run), minus nothing: the whole fixed cost of a call where the ranks run."""
    import nbcoll

    pair = comm.split(comm.rank // 2)
    x, y = nbcoll.to_device(np.ones(1)), nbcoll.empty(1, np.float64)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        pair.all_reduce(x, y)
        times.append(time.perf_counter() - start)
    pair.destroy()
    return float(np.median(times[1:]))


def format_plan(predictions: list[Prediction], top: int = 10) -> str:
    """The ranked layouts as a table, then why the best wins."""
    head = (
        f"{'layout':<24}{'step ms':>9}{'compute':>9}{'bubble':>9}{'tp comm':>9}{'pp comm':>9}{'dp comm':>9}{'MiB':>8}"
    )
    lines = [head]
    for p in predictions[:top]:
        parts = "".join(f"{1e3 * p.parts[k]:>9.2f}" for k in ("compute", "bubble", "tp comm", "pp comm", "dp comm"))
        lines.append(f"{str(p.layout):<24}{1e3 * p.step_seconds:>9.2f}{parts}{p.memory_bytes / 2**20:>8.2f}")
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
    "measure_call_latency",
    "measure_rates",
    "plan",
    "predict",
]
