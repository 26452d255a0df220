"""Running a benchmark on MPI ranks: it launches itself under mpiexec, times a sample, and says where it ran.

A benchmark that compares libraries on several ranks is one script with two halves::

    def run_rank(args):                       # under mpiexec: every rank runs this
        seconds = sample(MPI.COMM_WORLD, lambda: comm.all_reduce(x, y), inner=8)
        ...
    def main(argv=None):                      # started plainly: launch run_rank on each rank count in turn
        return run_on_ranks(__file__, run_rank, parse_args(argv), argv)

:func:`run_on_ranks` goes through :func:`nbcoll.launch.launch`, which wraps ``mpiexec`` (nbcoll has no launcher of
its own).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import report


def sample(world, call, inner: int) -> float:
    """Seconds per call for the slowest rank: a barrier, ``inner`` calls, the maximum over ranks."""
    from mpi4py import MPI

    world.Barrier()
    start = time.perf_counter()
    for _ in range(inner):
        call()
    return world.allreduce((time.perf_counter() - start) / inner, op=MPI.MAX)


def interleaved_samples(world, calls: dict[str, Callable[[], object]], repeats: int,
                        inner: int) -> tuple[dict[str, list[float]], list[tuple[str | None, str, float]]]:  # fmt: skip
    """Time every call ``repeats`` times, in the rounds of :func:`report.balanced_rounds` (each after each other,
    and in each place of a round, about equally often: a call's time depends on the ones just before it).

    Returns each name's samples (:func:`sample`) and the trail of ``(the name before, the name, its sample)``.
    """
    samples: dict[str, list[float]] = {name: [] for name in calls}
    trail: list[tuple[str | None, str, float]] = []
    for order in report.balanced_rounds(list(calls), repeats):
        for name in order:
            samples[name].append(sample(world, calls[name], inner))
            trail.append((trail[-1][1] if trail else None, name, samples[name][-1]))
    return samples, trail


def environment() -> dict:
    """:func:`report.environment` with the versions of mpi4py and of the MPI library."""
    import mpi4py
    from mpi4py import MPI

    return report.environment(mpi4py=mpi4py.__version__, mpi=MPI.Get_library_version().splitlines()[0].strip())


def run_on_ranks(
    script: str, run_rank, args: argparse.Namespace, argv: list[str] | None, bind_to: str | None = None
) -> int:
    """Under mpiexec, run this rank's part; started plainly, re-run ``script`` on each of ``args.ranks`` ranks
    (``bind_to``: pin the ranks as :func:`nbcoll.launch.launch` does)."""
    from nbcoll.launch import launch, under_mpi

    if under_mpi():
        return run_rank(args)
    status = 0
    for nranks in (int(x) for x in args.ranks.split(",")):
        rank_args = sys.argv[1:] if argv is None else argv
        result = launch(nranks, script, args=rank_args, env={"NBCOLL_BACKEND": "numpy"}, bind_to=bind_to)
        print(result.outputs[0] if result.ok else result.report(), end="", flush=True)
        status = status or (0 if result.ok else 1)
    return status
