"""Measuring the costs the planner reads (:class:`~nbcoll.parallel.plan.Rates`), by timing the pieces of a step.

:func:`measure_costs` is the one to call where the ranks run: every rank times, at the same moment, a block's
forward and backward at the micro-batch sizes of the plan's layouts, the embedding, the norm, head and loss, the
optimizer's update (:func:`measure_rates`), and the fixed cost of a collective call with and without a block's
work before it (:func:`measure_call_latency`). :func:`measure_rates` alone times the compute in one process.

Example::

    comm = nbcoll.init()
    rates = measure_costs(spec, comm, cores=os.cpu_count(), busy=1.0)   # collective: rank 0's figures everywhere
    predictions = plan(spec, comm.size, rates)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from nbcoll.comm import Communicator
    from nbcoll.parallel.plan_model import ModelSpec, Rates

# The model's classes come from nbcoll.parallel.plan_model, which imports neither this module nor the planner.


def token_range(spec: ModelSpec, ranks: int) -> tuple[int, int]:
    """The fewest and the most tokens one micro-batch holds over the layouts of ``ranks``: where to time."""
    from nbcoll.parallel.plan_model import layouts

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
    layers a run trains, over it, and ring attention over it times ``ring_overhead`` (per chunk pair attended);
    otherwise the plain layers. The pieces run in turn, ``repeats`` rounds or more,
    until ``busy`` seconds have passed."""
    import nbcoll
    import nbcoll.functional as F
    from nbcoll import nn
    from nbcoll.parallel import tensor_parallel as tp
    from nbcoll.parallel import vocab_parallel as vp
    from nbcoll.parallel.context_parallel import ring_attention
    from nbcoll.parallel.plan_model import Rates, default_rates
    from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock

    _check_measuring("measure_rates", repeats=repeats, cores=cores, busy=busy)
    if tokens is not None and not (len(tokens) == 2 and all(isinstance(t, int) and t >= 1 for t in tokens)):
        raise ValueError(f"measure_rates(tokens): expected two token counts >= 1, got {tokens!r}")
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
        block = ParallelTransformerBlock(spec.hidden, spec.heads, comm, spec.mlp_ratio, causal=True, dtype=dtype)
        embed = vp.VocabParallelEmbedding(spec.vocab, spec.hidden, comm, dtype=dtype)
        head = tp.ColumnParallelLinear(spec.hidden, spec.vocab, comm, dtype=dtype)

        def loss_of(logits: Any, ids: Any) -> Any:
            return vp.vocab_parallel_cross_entropy(logits, ids, comm)

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
    if comm is not None:  # ring attention over one rank: 2 zig-zag chunks, 3 chunk pairs seen (causal)
        shape = (1, spec.heads, spec.seq_len, spec.hidden // spec.heads)
        q = nbcoll.tensor(rng.standard_normal(shape), requires_grad=True, dtype=dtype)
        runs.append(lambda: ring_attention(q, q, q, comm, causal=True).sum().backward())
    timed = _interleaved_seconds(runs, repeats, busy)
    block_low, block_high, head_low, _, embed_overhead, update_overhead = timed[:6]
    (t1, _, _), (t2, _, _) = inputs
    f1, f2 = 3 * spec.layer_flops(t1), 3 * spec.layer_flops(t2)
    # The line through the two block times; a slope that noise made negative means FLOPs too few to see.
    seconds_per_flop = min(max((block_high - block_low) / (f2 - f1), 0.0), block_high / f2) if f2 > f1 else 0.0
    seconds_per_flop = max(seconds_per_flop, 1e-13)
    overhead = max(block_low - f1 * seconds_per_flop, 0.0)
    head_flops = 3 * 2.0 * t1 * spec.hidden * spec.vocab
    head_overhead = max(head_low - head_flops * seconds_per_flop, 0.0)  # the small micro-batch: mostly fixed
    ring_flops = 3 * 4.0 * spec.seq_len * spec.seq_len * spec.hidden / 2  # causal: half the scores
    ring_overhead = max(timed[6] - ring_flops * seconds_per_flop, 0.0) / 3 if comm is not None else 0.0
    return Rates(
        1.0 / seconds_per_flop,
        overhead,
        default_rates().link,
        cores=cores,
        embed_overhead=embed_overhead,
        head_overhead=head_overhead,
        update_overhead=update_overhead,
        ring_overhead=ring_overhead,
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


def measure_costs(
    spec: ModelSpec,
    comm: Communicator,
    cores: int | None = None,
    busy: float = 2.0,
    compute: Rates | None = None,
    partner_wait: bool = True,
) -> Rates:
    """Collective: every cost a plan of ``comm.size`` ranks reads, timed on all ranks at the same moment, so under
    the load the run will meet; rank 0's figures are returned on every rank, so every rank predicts alike.

    The compute costs (:func:`measure_rates` over a one-rank communicator, at the micro-batch sizes of
    :func:`token_range`, for ``busy`` seconds): with the ranks sharing ``cores`` cores, each rank had
    ``cores / ranks`` of one, so the times are scaled to a rank with a core of its own (the model itself knows the
    ranks share the cores). ``compute`` given (say, on the simulator, whose threads run in Python) stands in for
    them. Then the calls (:func:`measure_call_latency`, ``max(20, 100 x busy)`` of each): ``call_latency`` from
    all-reduces with the partner ready, and, unless ``partner_wait`` is False (where a block's forward takes
    seconds, as on the simulator), ``partner_wait``, the more an all-reduce waits when it follows a block's forward.
    """
    import nbcoll
    from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock

    _check_measuring("measure_costs", cores=cores, busy=busy)
    solo = comm.split(comm.rank)  # the layers a run trains, over a one-rank communicator
    if compute is None:
        comm.barrier()
        rates = measure_rates(spec, cores=cores, tokens=token_range(spec, comm.size), comm=solo, busy=busy)
        share = min(1.0, cores / comm.size) if cores else 1.0
        timed = [getattr(rates, name) for name in _COMPUTE_COSTS]
        timed = [timed[0] / share] + [seconds * share for seconds in timed[1:]]
        rates = dataclasses.replace(rates, **dict(zip(_COMPUTE_COSTS, _from_rank0(comm, timed), strict=True)))
    else:
        rates = dataclasses.replace(compute, cores=cores)
    calls = max(20, int(100 * busy))
    ready = measure_call_latency(comm, calls)
    after_work = ready
    if partner_wait:
        dtype = np.float64 if spec.bytes_per_value == 8 else np.float32
        block = ParallelTransformerBlock(spec.hidden, spec.heads, solo, spec.mlp_ratio, causal=True, dtype=dtype)
        x = nbcoll.tensor(np.zeros((1, spec.seq_len, spec.hidden)), dtype=dtype)
        after_work = measure_call_latency(comm, calls, lambda: block(x))
    ready, after_work = _from_rank0(comm, [ready, after_work])
    solo.destroy()
    return dataclasses.replace(rates, call_latency=ready, partner_wait=max(after_work - ready, 0.0))


def _check_measuring(function: str, repeats: int = 1, cores: int | None = None, busy: float = 0.0) -> None:
    """The arguments every measurement shares, checked before anything is timed."""
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"{function}(repeats): expected an integer >= 1, got {repeats!r}")
    if cores is not None and not (isinstance(cores, int) and cores >= 1):
        raise ValueError(f"{function}(cores): expected an integer >= 1 or None, got {cores!r}")
    if not (isinstance(busy, (int, float)) and 0 <= busy < float("inf")):
        raise ValueError(f"{function}(busy): expected seconds >= 0, got {busy!r}")


_COMPUTE_COSTS = (
    "flops_per_second",
    "block_overhead",
    "embed_overhead",
    "head_overhead",
    "update_overhead",
    "ring_overhead",
)


def _from_rank0(comm: Communicator, values: list[float]) -> list[float]:
    """Collective: rank 0's ``values`` on every rank."""
    import nbcoll

    out = nbcoll.empty(len(values), np.float64)
    comm.broadcast(nbcoll.to_device(np.array(values, dtype=np.float64)), out)
    return [float(v) for v in nbcoll.to_host(out)]


__all__ = ["measure_call_latency", "measure_costs", "measure_rates", "token_range"]
