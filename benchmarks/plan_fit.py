"""The planner against measured runs: every layout of 4 ranks trains the same transformer LM; predicted and
measured step time and memory per rank side by side, and the median errors.

    python benchmarks/plan_fit.py                 # launches itself on 4 ranks, numpy backend
    python benchmarks/plan_fit.py --long          # a longer sequence: layouts with cp, sp and recomputation too
    mpiexec -n 4 python benchmarks/plan_fit.py --steps 3

First every rank times the pieces of a step at the same moment, for 2 seconds, under the machine's load of the
run (``calibrate``, through ``nbcoll.parallel.plan.measure_costs``, as tutorial 20 does): a tensor-parallel
block's forward and backward at the smallest and the largest micro-batch of the layouts, the embedding, the norm,
head and loss, the optimizer's update, and the fixed cost of a collective call, with and without a block's work
before it. The times are scaled to one rank with a core of its own, since the model knows the ranks share
``--cores`` CPUs. The planner ranks the layouts from those figures.
Then ``--steps`` rounds each run every layout once, interleaved (the LM built with
:class:`~nbcoll.parallel.hybrid.HybridLM`, one warm-up step, one timed step, and one step whose peak bytes
``nbcoll.memory.stats()`` counts on each rank; the worst rank is kept); the median round's step is compared with
the prediction. With ``--long`` the layouts with more than 2 micro-batches are left out, to keep the run short.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np

import nbcoll
from nbcoll.parallel.hybrid import HybridLM
from nbcoll.parallel.plan import ModelSpec, Rates, default_rates, measure_costs, plan

SPEC = ModelSpec(layers=4, hidden=32, seq_len=16, batch=16, heads=4, vocab=32, bytes_per_value=8)
# --long: a longer sequence, where context parallelism, sequence parallelism and recomputation join the layouts.
LONG = ModelSpec(layers=2, hidden=16, seq_len=32, batch=4, heads=4, vocab=32, bytes_per_value=8)


def measure_round(comm, spec, layout) -> tuple[float, int]:
    """One round of ``layout``: the LM built, one warm-up step, one timed step, and the peak bytes of one more
    step on this rank (:meth:`~nbcoll.parallel.hybrid.HybridLM.step_peak_bytes`)."""
    run = HybridLM(spec, comm, layout)
    ids = np.random.default_rng(6).integers(0, spec.vocab, (spec.batch, spec.seq_len))
    targets = np.roll(ids, -1, axis=1)
    run.step(ids, targets)
    comm.barrier()
    start = time.perf_counter()
    run.step(ids, targets)
    comm.barrier()
    seconds = time.perf_counter() - start
    peak = run.step_peak_bytes(ids, targets)
    run.destroy()
    return seconds, peak


def most(comm, value: int) -> int:
    """Collective: the largest ``value`` over the ranks (the planner's memory is the worst rank's)."""
    out = nbcoll.empty(comm.size, np.int64)
    comm.all_gather(nbcoll.to_device(np.array([value], np.int64)), out)
    return int(nbcoll.to_host(out).max())


def calibrate(comm, spec, args: argparse.Namespace, busy: float) -> Rates:
    """Collective: the rates of now (:func:`~nbcoll.parallel.plan.measure_costs`), or, given ``--flops``, the
    command line's compute rate and block overhead with only the calls timed."""
    given = None
    if args.flops:
        given = dataclasses.replace(default_rates(), flops_per_second=args.flops, block_overhead=args.overhead)
    return measure_costs(spec, comm, cores=args.cores, busy=busy, compute=given)


def run_rank(args: argparse.Namespace) -> int:
    nbcoll.set_default_dtype(np.float64)
    comm = nbcoll.init()
    spec = LONG if args.long else SPEC
    rates = calibrate(comm, spec, args, busy=2.0)
    predictions = plan(spec, comm.size, rates, long_sequences=args.long)
    if args.long:
        predictions = [p for p in predictions if p.layout.chunks <= 2]
    # Interleaved: every round runs every layout once, so that the machine's load, which moves over the minutes
    # of the run (other work shares its cores), falls on all layouts alike; the median round is kept.
    times: dict[int, list[float]] = {k: [] for k in range(len(predictions))}
    peaks: dict[int, int] = {}
    for _ in range(args.steps):
        for k, p in enumerate(predictions):
            seconds, peak = measure_round(comm, spec, p.layout)
            times[k].append(seconds)
            peaks[k] = most(comm, peak)
    if comm.rank == 0:
        print(
            f"{spec}\n{comm.size} ranks on {args.cores} cores; timing: {rates.flops_per_second / 1e9:.3f} GFLOP/s and "
            f"{rates.block_overhead * 1e3:.2f} ms per block forward + backward, "
            f"{rates.head_overhead * 1e3:.2f} ms head and loss, {rates.embed_overhead * 1e3:.2f} ms embedding, "
            f"{rates.update_overhead * 1e3:.2f} ms update per block, {rates.call_latency * 1e3:.2f} ms per call, "
            f"{rates.partner_wait * 1e3:.2f} ms more "
            f"between tensor-parallel partners; {args.steps} interleaved rounds, the median step kept\n"
        )
        width = max(len(str(p.layout)) for p in predictions) + 2
        print(
            f"{'layout':<{width}}{'measured ms':>12}{'predicted ms':>14}{'error':>7}"
            f"{'measured B':>12}{'predicted B':>13}{'error':>7}"
        )
        errors, memory_errors = [], []
        rows = sorted(range(len(predictions)), key=lambda k: statistics.median(times[k]))
        for k in rows:
            p, measured = predictions[k], statistics.median(times[k])
            errors.append(abs(p.step_seconds - measured) / measured)
            memory_errors.append(abs(p.memory_bytes - peaks[k]) / peaks[k])
            print(
                f"{str(p.layout):<{width}}{1e3 * measured:>12.1f}{1e3 * p.step_seconds:>14.1f}{errors[-1]:>7.0%}"
                f"{peaks[k]:>12,}{p.memory_bytes:>13,}{memory_errors[-1]:>7.0%}"
            )
        exact = sum(p.memory_bytes == peaks[k] for k, p in enumerate(predictions))
        print(
            f"\nmedian error over {len(rows)} layouts: step time {statistics.median(errors):.0%}, memory per rank "
            f"{statistics.median(memory_errors):.0%} (exactly equal: {exact} of {len(rows)})"
        )
        best_measured = predictions[rows[0]].layout
        print(f"predicted best {predictions[0].layout}; measured best {best_measured}")
    comm.destroy()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="interleaved rounds, one timed step per layout each")
    parser.add_argument("--long", action="store_true", help="a longer sequence; layouts with cp, sp and recompute")
    parser.add_argument("--ranks", type=int, default=4, help="ranks to launch when not under mpiexec")
    parser.add_argument("--flops", type=float, default=0.0, help="FLOP/s of one rank (default: measured)")
    parser.add_argument("--overhead", type=float, default=0.0, help="seconds per block beyond its FLOPs")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="devices the ranks share (default: CPUs)")
    args = parser.parse_args(argv)
    from nbcoll.launch import launch, under_mpi

    if under_mpi():
        return run_rank(args)
    argv = sys.argv[1:] if argv is None else argv
    result = launch(args.ranks, __file__, args=argv, timeout=1800)
    print(result.outputs[0] if result.ok else result.report(), end="", flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
