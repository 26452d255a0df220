"""All-reduce on one channel against two: the double binary tree's trees one after the other, or at once.

Two communicators of the same ranks, one with ``nchannels=1`` and one with ``nchannels=2`` (``NBCOLL_NCHANNELS``),
run the same all-reduce on the same buffers, interleaved repeat by repeat, so both see the same noise; the table
gives the median time per call of each and their ratio. The ring runs beside the tree for comparison.

Run::

    python benchmarks/lab/channels.py                      # 2 and 4 ranks, numpy backend, 8 B to 16 MiB
    python benchmarks/lab/channels.py --ranks 2 --sizes 8,1M --repeats 5

Writes ``channels_<n>ranks.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
import report

HERE = Path(__file__).resolve().parent
ALGOS = ("tree", "ring")
CHANNELS = (1, 2)


def time_calls(comm, world, algo: str, x: np.ndarray, calls: int) -> float:
    """Seconds per call of ``calls`` all-reduces, the ranks started together; the slowest rank's time."""
    from mpi4py import MPI

    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        comm.all_reduce(x, algo=algo)
    return world.allreduce(time.perf_counter() - t0, op=MPI.MAX) / calls


def measure(comms: dict[int, object], world, sizes: list[int], repeats: int) -> dict[tuple, list[float]]:
    """(algo, nbytes, nchannels) -> seconds per call of each repeat; every configuration once per repeat."""
    times: dict[tuple, list[float]] = {}
    buffers = {nbytes: np.ones(max(nbytes // 4, 1), np.float32) for nbytes in sizes}
    for nbytes in sizes:  # warm up: windows, first-call costs
        for comm in comms.values():
            for algo in ALGOS:
                comm.all_reduce(buffers[nbytes], algo=algo)
    for _ in range(repeats):
        for nbytes in sizes:
            calls = max(2, min(50, (4 << 20) // max(nbytes, 1)))
            for algo in ALGOS:
                for nch, comm in comms.items():
                    times.setdefault((algo, nbytes, nch), []).append(
                        time_calls(comm, world, algo, buffers[nbytes], calls)
                    )
    return times


def table(times: dict[tuple, list[float]], sizes: list[int], nranks: int, command: str) -> str:
    reading = ("Median time per call (us) over interleaved repeats; ratio = 1 channel / 2 channels (above 1: two "
               f"channels are faster). Command: ``{command}``.")  # fmt: skip
    lines = [
        *report.same_run_caption(__file__, nranks, "float32, all-reduce", reading),
        f".. list-table:: all-reduce on 1 and 2 channels, {nranks} ranks",
        "   :header-rows: 1",
        "",
        "   * - size (B)",
    ]
    for algo in ALGOS:
        lines += [f"     - {algo}, 1 channel", f"     - {algo}, 2 channels", f"     - {algo} ratio"]
    for nbytes in sizes:
        lines.append(f"   * - {nbytes}")
        for algo in ALGOS:
            one, two = (float(np.median(times[(algo, nbytes, nch)])) for nch in CHANNELS)
            lines += [f"     - {one * 1e6:.0f}", f"     - {two * 1e6:.0f}", f"     - {one / two:.2f}x"]
    return "\n".join(lines) + "\n"


def compare(args, world, sizes: list[int]) -> int:
    """Every channel count at every size, in one launch; rank 0 writes the table."""
    from nbcoll.comm import CommConfig, init

    n, base = world.Get_size(), CommConfig.from_env()
    comms = {nch: init(world, dataclasses.replace(base, nchannels=nch)) for nch in CHANNELS}
    times = measure(comms, world, sizes, args.repeats)
    for comm in comms.values():
        comm.destroy()
    return report.publish_same_run(
        world, args, __file__, "channels", lambda command, _: table(times, sizes, n, command)
    )


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report.same_run_main(__file__, description, "8,64K,1M,16M", HERE / "results", compare, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
