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

What the model reads is measured (:class:`Rates`): the FLOP rate and the fixed cost of a block's forward and
backward (Python and kernel launches, which dominate small models) from timing a block at the micro-batch sizes
the layouts use (:func:`measure_rates`, :func:`token_range`), the embedding's and the head and loss's fixed
costs, and the optimizer's per block. Each collective costs the communicator's calibrated alpha-beta model
(:mod:`nbcoll.comm.tuner`) at its real size, plus ``call_latency``, the fixed cost of one call where the ranks
run, and, for an all-reduce, ``partner_wait``: on shared cores a call that follows a layer's work also waits for
its partner to get a core back (:func:`measure_call_latency`), time that costs the step nothing in a pipeline,
whose other stages use the core meanwhile. Memory per rank counts the
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll.comm import tuner

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


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
    """What the hardware does: measured compute rate and fixed costs, and the links' alpha-beta model.

    Example::

        Rates(flops_per_second=2e9, block_overhead=4e-3, link=tuner.LinkModel(40e-6, 2e9), cores=2)
    """

    flops_per_second: float
    block_overhead: float  # seconds per block forward + backward beyond its FLOPs
    link: tuner.LinkModel
    chunk_bytes: int = 1 << 20
    cores: int | None = None  # devices the ranks share (CPU cores here); None: one device per rank
    call_latency: float = 0.0  # seconds each collective or transfer call costs beyond the alpha-beta model
    # seconds an all-reduce between partners that take turns on shared cores waits beyond ``call_latency``
    partner_wait: float = 0.0
    embed_overhead: float = 0.0  # seconds per micro-batch of the embedding, forward + backward (first stage)
    head_overhead: float = 0.0  # seconds per micro-batch of final norm, head and loss beyond their FLOPs (last stage)
    update_overhead: float = 0.0  # seconds per block of the optimizer step, once per training step


@dataclass
class Prediction:
    layout: Layout
    step_seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # compute, bubble, sharing, tp comm, pp comm, dp comm
    memory_bytes: int = 0


def all_reduce_seconds(nbytes: float, ranks: int, rates: Rates) -> float:
    if ranks == 1:
        return 0.0
    ring = tuner.estimate("all_reduce", "ring", int(nbytes), ranks, rates.chunk_bytes, rates.link)
    return ring + rates.call_latency + rates.partner_wait


def stage_seconds(spec: ModelSpec, layout: Layout, stage: int, rates: Rates) -> tuple[float, float, float]:
    """One micro-batch's forward and backward on pipeline stage ``stage``: (compute, tp comm, pp comm) seconds.

    Every block costs its FLOPs over tp at the measured rate plus the fixed ``block_overhead`` and four
    all-reduces over tp (f and g, forward and backward); the first stage adds the embedding (one all-reduce), the
    last the norm, head and loss (three all-reduces in the loss, one in the head's backward).
    """
    dp, tp, pp, m = layout.dp, layout.tp, layout.pp, layout.chunks
    tokens = spec.batch // (dp * m) * spec.seq_len
    per_stage = spec.layers // pp
    compute = per_stage * (3 * spec.layer_flops(tokens) / tp / rates.flops_per_second + rates.block_overhead)
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
    slowest = max(range(pp), key=lambda s: sum(stages[s]))
    compute, tp_comm, pp_comm = stages[slowest]
    fill_and_drain = sum(sum(c) for c in stages) - sum(stages[slowest])
    update = per_stage * rates.update_overhead
    params = per_stage * spec.layer_params() // tp + 2 * spec.vocab * spec.hidden // tp // pp
    dp_comm = all_reduce_seconds(params * value, dp, rates)
    if pp > 1:
        dp_comm += rates.call_latency  # the loss, broadcast from the last stage once per step
    # Ranks that share fewer devices than there are ranks take turns: the step lasts at least every rank's
    # compute divided by the devices. Idle time in the bubble is then filled by other ranks' work.
    ranks = dp * tp * pp
    work = dp * tp * sum(m * c[0] + update for c in stages)
    shared = work / rates.cores if rates.cores and rates.cores < ranks else 0.0
    parts = {
        "compute": m * compute + update,
        "bubble": fill_and_drain,
        # A rank waiting on a collective or a neighbour leaves its core to another rank's work.
        "sharing": max(0.0, shared - m * (compute + tp_comm + pp_comm) - update - fill_and_drain),
        "tp comm": m * tp_comm,
        "pp comm": m * pp_comm,
        "dp comm": dp_comm,
    }
    h, f, heads = spec.hidden, spec.mlp, spec.heads
    tokens = spec.batch // (dp * m) * spec.seq_len
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


def token_range(spec: ModelSpec, ranks: int) -> tuple[int, int]:
    """The fewest and the most tokens one micro-batch holds over the layouts of ``ranks``: where to time."""
    counts = [spec.batch // (lay.dp * lay.chunks) * spec.seq_len for lay in layouts(spec, ranks)]
    return (min(counts), max(counts)) if counts else (spec.seq_len, spec.batch * spec.seq_len)


def _interleaved_seconds(runs: list[Callable[[], Any]], repeats: int, busy: float) -> list[float]:
    """The mean seconds of each of ``runs``, called in turn (after one round that warms up) for at least
    ``repeats`` rounds and until ``busy`` seconds have passed. In turn, so that on a shared CPU every piece meets
    the same load; the mean, not the median, since a step is preempted as often as its pieces are."""
    for run in runs:
        run()
    totals, rounds, start = [0.0] * len(runs), 0, time.perf_counter()
    while rounds < repeats or time.perf_counter() - start < busy:
        for i, run in enumerate(runs):
            begin = time.perf_counter()
            run()
            totals[i] += time.perf_counter() - begin
        rounds += 1
    return [total / rounds for total in totals]


def measure_rates(
    spec: ModelSpec,
    repeats: int = 3,
    cores: int | None = None,
    tokens: tuple[int, int] | None = None,
    comm: Communicator | None = None,
    busy: float = 0.0,
) -> Rates:
    """Time, in this process, the pieces of a step at two micro-batch sizes of ``tokens`` (by default one
    sequence and eight; :func:`token_range` gives the sizes a plan's layouts use): a transformer block's forward
    and backward, the line through the two giving the FLOP rate (slope) and the per-block overhead (intercept);
    the embedding's, and the norm, head and loss's, forward and backward beyond their FLOPs; and the optimizer
    step over a block's parameters. Given ``comm`` (a one-rank communicator), the pieces are the tensor-parallel
    layers a run trains, over it; otherwise the plain layers. The pieces run in turn, ``repeats`` rounds or more,
    until ``busy`` seconds have passed."""
    import nbcoll
    import nbcoll.functional as F
    from nbcoll import nn
    from nbcoll.parallel import tensor_parallel as tp
    from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock

    dtype = np.float64 if spec.bytes_per_value == 8 else np.float32
    rng = np.random.default_rng(0)
    norm = nn.LayerNorm(spec.hidden, dtype=dtype)
    if comm is None:
        block = nn.TransformerBlock(spec.hidden, spec.heads, mlp_ratio=spec.mlp_ratio, causal=True, dtype=dtype)
        embed = nn.Embedding(spec.vocab, spec.hidden, dtype=dtype)
        head = nn.Linear(spec.hidden, spec.vocab, dtype=dtype)

        def loss_of(logits: Any, ids: Any) -> Any:
            return F.cross_entropy(logits.reshape(-1, spec.vocab), ids.reshape(-1))
    else:
        block = ParallelTransformerBlock(spec.hidden, spec.heads, comm, spec.mlp_ratio, causal=True)
        embed = tp.VocabParallelEmbedding(spec.vocab, spec.hidden, comm)
        head = tp.ColumnParallelLinear(spec.hidden, spec.vocab, comm)

        def loss_of(logits: Any, ids: Any) -> Any:
            return tp.vocab_parallel_cross_entropy(logits, ids, comm)

    low, high = tokens or (spec.seq_len, 8 * spec.seq_len)
    inputs = []
    for count in (low, high):
        rows = max(1, count // spec.seq_len)
        x = nbcoll.tensor(rng.standard_normal((rows, spec.seq_len, spec.hidden)), dtype=dtype)
        inputs.append((rows * spec.seq_len, x, rng.integers(0, spec.vocab, (rows, spec.seq_len))))
    optimizer = nbcoll.optim.SGD(block.parameters(), lr=0.0, momentum=0.9)  # lr 0 leaves the block as it is
    runs = [lambda x=x: block(x).sum().backward() for _, x, _ in inputs]  # leaves gradients for the optimizer
    runs += [lambda x=x, ids=ids: loss_of(head(norm(x)), ids).backward() for _, x, ids in inputs]
    runs += [lambda ids=inputs[0][2]: embed(ids).sum().backward(), optimizer.step]
    block_low, block_high, head_low, _, embed_overhead, update_overhead = _interleaved_seconds(runs, repeats, busy)
    (t1, _, _), (t2, _, _) = inputs
    f1, f2 = 3 * spec.layer_flops(t1), 3 * spec.layer_flops(t2)
    # The line through the two block times; a slope that noise made negative means FLOPs too few to see.
    seconds_per_flop = min(max((block_high - block_low) / (f2 - f1), 0.0), block_high / f2) if f2 > f1 else 0.0
    seconds_per_flop = max(seconds_per_flop, 1e-13)
    overhead = max(block_low - f1 * seconds_per_flop, 0.0)
    head_flops = 3 * 2.0 * t1 * spec.hidden * spec.vocab
    head_overhead = max(head_low - head_flops * seconds_per_flop, 0.0)  # the small micro-batch: mostly fixed
    return Rates(
        1.0 / seconds_per_flop,
        overhead,
        default_rates().link,
        cores=cores,
        embed_overhead=embed_overhead,
        head_overhead=head_overhead,
        update_overhead=update_overhead,
    )


def measure_call_latency(comm: Any, repeats: int = 20, work: Callable[[], Any] | None = None) -> float:
    """Collective: the median seconds of an 8-byte all-reduce between pairs of ranks, all pairs at once (as
    tensor-parallel partners run): the whole fixed cost of a call where the ranks run.

    With ``work``, each call follows one ``work()`` on every rank, as a tensor-parallel layer's all-reduce follows
    its matmuls; where ranks share cores, a call then also waits for its partner to get a core back, which a loop
    of bare calls (both partners always ready) never shows. Only the calls are timed.
    """
    import nbcoll

    pair = comm.split(comm.rank // 2)
    x, y = nbcoll.to_device(np.ones(1)), nbcoll.empty(1, np.float64)
    pair.all_reduce(x, y)  # warm-up, and the pairs start together
    times = []
    for _ in range(repeats):
        if work is not None:
            work()
        start = time.perf_counter()
        pair.all_reduce(x, y)
        times.append(time.perf_counter() - start)
    pair.destroy()
    return float(np.median(times))


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
    "stage_seconds",
    "token_range",
]
