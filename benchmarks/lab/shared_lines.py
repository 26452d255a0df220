"""A copy into shared memory that another process read just before, with ordinary and with streaming stores.

What a staged piece, a FIFO chunk and an LL line cost their writer (:mod:`nbcoll.kernels.stream_copy`,
``NBCOLL_STREAM_SHARED_BYTES``), without nbcoll's collectives around them: two ranks map one segment
(``MPI.Win.Allocate_shared``); in every round rank 0 copies ``S`` bytes into one of its two halves, a barrier
hands them over, and rank 1 copies them out, so each half is written a round after the reader last read it. The
rounds take turns between the ways to write:

* ``ordinary``: ``numpy.copyto``, which must first take each line back from the reader's cache;
* ``streaming``: :func:`nbcoll.kernels.stream_copy.copy`, which writes whole lines without reading them;
* ``unread``: ``numpy.copyto`` into a third region the reader never reads (the copy alone).

The table gives the median of each, for the writer and for the reader's copy after it. On a machine whose two
cores share a cache the first two cost about the same; where they do not, ``ordinary`` costs many times
``unread`` (the Performance page, *Copies into memory a peer reads*, which calls them the quick and slow phases).

Run::

    python benchmarks/lab/shared_lines.py                     # 1 MiB, 400 rounds
    python benchmarks/lab/shared_lines.py --bytes 128K --rounds 200

Writes ``shared_lines.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
from ranks import environment, run_on_ranks
from report import list_table, same_run_caption, write_table

HERE = Path(__file__).resolve().parent
WAYS = ("ordinary", "streaming", "unread")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", default="1M", help="bytes of each copy (default 1M)")
    p.add_argument("--rounds", type=int, default=400, help="rounds in all, the ways taking turns (default 400)")
    p.add_argument("--ranks", default="2", help=argparse.SUPPRESS)  # a writer and a reader
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .rst")
    return p.parse_args(argv)


def run_rank(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from nbcoll.kernels import stream_copy
    from nbcoll.perf.bandwidth import parse_size

    world = MPI.COMM_WORLD
    if world.Get_size() != 2:
        raise SystemExit(f"shared_lines.py: runs on 2 ranks, a writer and a reader, got {world.Get_size()}")
    ways = WAYS if stream_copy.available() else ("ordinary", "unread")
    write = {"ordinary": np.copyto, "streaming": stream_copy.copy, "unread": np.copyto}  # dst, src
    nbytes, rank = parse_size(args.bytes), world.Get_rank()
    window = MPI.Win.Allocate_shared(3 * nbytes if rank == 0 else 0, 1, comm=world)
    memory, _ = window.Shared_query(0)
    shared = np.ndarray(3 * nbytes, np.uint8, buffer=memory)
    src = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)  # the writer's, and what the reader expects
    dst = np.zeros(nbytes, np.uint8)
    write[ways[1]](dst[:64], src[:64])  # the compiled copy is loaded before the first timed round
    times: dict[tuple[str, str], list[float]] = {(way, who): [] for way in ways for who in ("writer", "reader")}
    wrong = 0
    for round_ in range(args.rounds):
        way = ways[round_ % len(ways)]
        at = 2 * nbytes if way == "unread" else (round_ % 2) * nbytes  # the two halves in turn, or the third
        region = shared[at : at + nbytes]
        world.Barrier()
        if rank == 0:
            start = time.perf_counter()
            write[way](region, src)
            times[(way, "writer")].append(time.perf_counter() - start)
        world.Barrier()
        if rank == 1 and way != "unread":
            start = time.perf_counter()
            np.copyto(dst, region)
            times[(way, "reader")].append(time.perf_counter() - start)
            wrong += not np.array_equal(dst, src)
    gathered = world.gather(times, root=0)
    wrong = world.allreduce(wrong)
    window.Free()
    if rank == 0:
        merged = {key: gathered[0][key] + gathered[1][key] for key in times}
        publish(args, nbytes, [[way, median_us(merged[(way, "writer")]), median_us(merged[(way, "reader")])]
                               for way in ways], wrong)  # fmt: skip
    return 1 if wrong else 0


def median_us(seconds: list[float]) -> str:
    """The median of the samples after the first (which pays for first touches), in us; ``-`` if none."""
    return f"{statistics.median(seconds[1:]) * 1e6:.1f}" if seconds[1:] else "-"


def publish(args: argparse.Namespace, nbytes: int, rows: list[list[str]], wrong: int) -> None:
    """Print the table and write it as ``shared_lines.rst`` into ``args.out`` (:func:`report.write_table`)."""
    command = f"python benchmarks/lab/shared_lines.py --bytes {args.bytes} --rounds {args.rounds}"
    reading = (f"Median us per copy; the reader's copies that differ from the writer's bytes: {wrong}. numpy "
               f"{environment()['numpy']}. Command: ``{command}``.")  # fmt: skip
    title = "A copy into lines the reader read a round before, 2 ranks"
    lines = same_run_caption(__file__, 2, f"{nbytes} bytes a copy, {args.rounds} rounds", reading)
    table = list_table(["way to write", "writer (us)", "reader after it (us)"], rows, title)
    write_table(args.out, "shared_lines.rst", "\n".join(lines + table) + "\n")


def main(argv: list[str] | None = None) -> int:
    return run_on_ranks(__file__, run_rank, parse_args(argv), argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
