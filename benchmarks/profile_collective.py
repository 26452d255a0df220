"""Where the time of one collective goes: a cProfile of rank 0, summed into waiting, copying, reducing and the
Python bookkeeping around them.

Run::

    python benchmarks/profile_collective.py                       # all_reduce (ring), 2 ranks, 8 B and 16 MiB
    mpiexec -n 4 python benchmarks/profile_collective.py --algo tree --sizes 1M
    python benchmarks/profile_collective.py --backend cuda --algo tuner  # on a GPU, the tuner's choice

Writes ``profile_<collective>_<algo>_<n>ranks.txt`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

CATEGORIES = {
    # category -> substrings of "file:function" whose own time (tottime) belongs to it
    "waiting for a peer (sleep between polls)": ("time.sleep", "sched_yield"),
    "copying chunks (copy kernel / NumPy copy)": ("copy_reference", "copy.py:copy"),
    "reducing (combine kernel / NumPy reference, its dtype conversions)": (
        "combine_reference",
        "astype",
        "combine_into",
        "fold_into",
        "ufunc",
    ),
    "polling for abort messages (MPI Iprobe)": ("abort_message_source", "Iprobe"),
}
DRIVER = "CUDA driver calls (launches, copies, synchronizations: time the GPU makes the host wait included)"
NUMBA_CUDA = "numba-cuda's Python (preparing launches, slicing device arrays)"


def categorize(stats: pstats.Stats) -> dict[str, float]:
    totals = dict.fromkeys([*CATEGORIES, DRIVER, NUMBA_CUDA], 0.0)
    totals["Python bookkeeping (checks, steps, records, the progress loop)"] = 0.0
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        key = f"{os.path.basename(filename)}:{function}"
        if "numba_cuda" in filename:  # the cuda backend's own layer: the driver, and the Python above it
            totals[DRIVER if function == "safe_cuda_api_call" else NUMBA_CUDA] += tottime
            continue
        for category, needles in CATEGORIES.items():
            if any(n in key for n in needles):
                totals[category] += tottime
                break
        else:
            totals["Python bookkeeping (checks, steps, records, the progress loop)"] += tottime
    return totals


def profile(comm, world, collective: str, algo: str, nbytes: int, iters: int) -> tuple[float, dict, str]:
    from nbcoll import memory

    algo = None if algo == "tuner" else algo
    x = memory.to_device(np.ones(max(nbytes // 4, 1), np.float32))
    y = memory.zeros(max(nbytes // 4, 1), np.float32)
    call = {
        "all_reduce": lambda: comm.all_reduce(x, y, algo=algo),
        "broadcast": lambda: comm.broadcast(x, y, algo=algo),
    }[collective]
    call()
    world.Barrier()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(iters):
        call()
    memory.synchronize()  # on a GPU the last kernels may still run
    profiler.disable()
    stats = pstats.Stats(profiler)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime").print_stats(12)
    return stats.total_tt / iters, categorize(stats), text.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collective", default="all_reduce", choices=("all_reduce", "broadcast"))
    p.add_argument("--algo", default="ring", help="an algorithm's name, or 'tuner' for the tuner's choice")
    p.add_argument("--sizes", default="8,16M", help="comma-separated sizes (8, 64K, 16M, ...)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--ranks", type=int, default=2, help="ranks to launch when not under mpiexec")
    p.add_argument(
        "--backend", default=None, choices=("numpy", "sim", "cuda"), help="default: NBCOLL_BACKEND, else numpy"
    )
    p.add_argument("--out", default=str(HERE / "results"))
    args = p.parse_args(argv)
    if args.backend:
        os.environ["NBCOLL_BACKEND"] = args.backend  # before nbcoll is imported, which reads it once
    from nbcoll.launch import launch, under_mpi

    if not under_mpi():
        backend = os.environ.get("NBCOLL_BACKEND", "numpy")
        result = launch(
            args.ranks, __file__, args=sys.argv[1:] if argv is None else argv, env={"NBCOLL_BACKEND": backend}
        )
        print(result.outputs[0] if result.ok else result.report(), end="")
        return 0 if result.ok else 1

    from mpi4py import MPI

    import nbcoll
    from nbcoll.comm import init
    from nbcoll.perf.bandwidth import parse_size

    world = MPI.COMM_WORLD
    comm = init(world)
    lines = [
        f"# cProfile of rank 0: {args.collective} ({args.algo}), {comm.size} ranks, {nbcoll.get_backend()} backend, "
        f"{args.iters} calls",
        f"# command: mpiexec -n {comm.size} python benchmarks/profile_collective.py --algo {args.algo} "
        f"--sizes {args.sizes}" + (f" --backend {args.backend}" if args.backend else ""),
    ]
    for size_text in args.sizes.split(","):
        nbytes = parse_size(size_text)
        per_call, totals, top = profile(comm, world, args.collective, args.algo, nbytes, args.iters)
        lines.append(f"\n## {nbytes} bytes: {per_call * 1e3:.2f} ms per call under the profiler")
        for category, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
            share = seconds / (per_call * args.iters) if per_call else 0.0
            lines.append(f"  {share:6.1%}  {seconds / args.iters * 1e3:8.3f} ms  {category}")
        lines.append("\n" + "\n".join(line for line in top.splitlines() if line.strip())[:3000])
    if comm.rank == 0:
        text = "\n".join(lines) + "\n"
        print(text)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"profile_{args.collective}_{args.algo}_{comm.size}ranks.txt"
        path.write_text(text)
        print(f"# wrote {path}")
    comm.destroy()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
