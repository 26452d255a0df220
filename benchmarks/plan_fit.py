"""The planner against measured runs: every layout of 4 ranks trains the same transformer LM; predicted and
measured step times side by side, and the median error.

    python benchmarks/plan_fit.py                 # launches itself on 4 ranks, numpy backend
    mpiexec -n 4 python benchmarks/plan_fit.py --steps 3

Every rank first times one block at the same moment (``measure_rates``, under the machine's load of the run),
scaled to one rank with a core of its own, since the model knows the ranks share ``--cores`` CPUs.
Then, for every layout the planner lists, the LM is built (tensor-parallel layers over ``mesh["tp"]``,
DistributedDataParallel over ``mesh["dp"]``, a 1F1B pipeline over ``mesh["pp"]``), trained one warm-up step and
``--steps`` timed steps; rank 0 keeps the median step.
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
from nbcoll.parallel.plan import ModelSpec, default_rates, measure_call_latency, measure_rates, plan

SPEC = ModelSpec(layers=4, hidden=32, seq_len=16, batch=16, heads=4, vocab=32, bytes_per_value=8)


def measure_layout(comm, layout, steps: int) -> float:
    """The median seconds of ``steps`` training steps (after one warm-up step) of the LM under ``layout``."""
    run = HybridLM(SPEC, comm, layout)
    rng = np.random.default_rng(6)
    times = []
    for _ in range(steps + 1):
        ids = rng.integers(0, SPEC.vocab, (SPEC.batch, SPEC.seq_len))
        comm.barrier()
        start = time.perf_counter()
        run.step(ids, np.roll(ids, -1, axis=1))
        comm.barrier()
        times.append(time.perf_counter() - start)
    run.destroy()
    return statistics.median(times[1:])


def run_rank(args: argparse.Namespace) -> int:
    nbcoll.set_default_dtype(np.float64)
    comm = nbcoll.init()
    # Rank 0 times a block alone (the others wait), so the rate is one rank's with a core to itself; every rank
    # then ranks the layouts with rank 0's figures. The ranks share this machine's cores.
    if args.flops:  # given on the command line
        rates = dataclasses.replace(
            default_rates(args.cores), flops_per_second=args.flops, block_overhead=args.overhead
        )
    else:
        # Every rank times a block at the same moment, under the machine's load of now; with the ranks sharing
        # fewer cores than there are ranks, each had cores / ranks of a core, so its figures are scaled back to
        # one rank's with a core of its own. Rank 0's figures are used everywhere, so every rank ranks alike.
        comm.barrier()
        rates = measure_rates(SPEC, cores=args.cores)
        share = min(1.0, args.cores / comm.size) if args.cores else 1.0
        timed = np.array([rates.flops_per_second / share, rates.block_overhead * share])
        measured_rates = nbcoll.empty(2, np.float64)
        comm.broadcast(nbcoll.to_device(timed), measured_rates)
        flops, overhead = nbcoll.to_host(measured_rates)
        rates = dataclasses.replace(rates, flops_per_second=float(flops), block_overhead=float(overhead))
    rates = dataclasses.replace(rates, call_latency=measure_call_latency(comm))
    latency = nbcoll.empty(1, np.float64)  # rank 0's, so every rank ranks the layouts alike
    comm.broadcast(nbcoll.to_device(np.array([rates.call_latency])), latency)
    rates = dataclasses.replace(rates, call_latency=float(nbcoll.to_host(latency)[0]))
    predictions = plan(SPEC, comm.size, rates)
    rows = []
    for p in predictions:
        measured = measure_layout(comm, p.layout, args.steps)
        rows.append((p, measured, abs(p.step_seconds - measured) / measured))
    if comm.rank == 0:
        print(
            f"{SPEC}\n{comm.size} ranks; measured {rates.flops_per_second / 1e9:.3f} GFLOP/s and "
            f"{rates.block_overhead * 1e3:.2f} ms per block forward + backward, "
            f"{rates.call_latency * 1e3:.2f} ms per collective call\n"
        )
        print(f"{'layout':<24}{'predicted ms':>14}{'measured ms':>13}{'error':>8}")
        for p, measured, error in sorted(rows, key=lambda r: r[1]):
            print(f"{str(p.layout):<24}{1e3 * p.step_seconds:>14.1f}{1e3 * measured:>13.1f}{error:>8.0%}")
        print(f"\nmedian error over {len(rows)} layouts: {statistics.median(r[2] for r in rows):.0%}")
        best_predicted, best_measured = predictions[0].layout, min(rows, key=lambda r: r[1])[0].layout
        print(f"predicted best {best_predicted}; measured best {best_measured}")
    comm.destroy()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per layout (the median is kept)")
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
