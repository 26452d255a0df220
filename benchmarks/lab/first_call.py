"""What a collective's first call costs after other work, call by call, with MPI's beside it.

``vs_mpi.py`` times each contender right after another one ran, and a training step calls its collectives right
after its own compute: the first call finds the caches holding someone else's data and code. This benchmark
times each call on its own. Before every trial the ranks do one kind of other work, then a barrier, then the
same collective four times, each call timed alone (the slowest rank's time); the work before is:

- ``same``: the same library's same call, four times (a loop of calls: what a steady state sees);
- ``other``: the other library's same collective, four times (nbcoll's direct algorithm, or MPI);
- ``compute``: 3 ms of Python arithmetic on every rank, touching almost no memory;
- ``memory``: a sum over 32 MiB on every rank, which pushes the collective's buffers out of the caches.

nbcoll runs its direct algorithm on registered inputs (``comm.alloc``, as ``vs_mpi.py`` runs it), MPI its own
collective on buffers of its own; the kinds of work and the two libraries take turns, trial by trial, and every
result is checked. The table gives, per collective, size and work before, the median time of the 1st, 2nd and
4th call of each library, and each one's 1st call over its 4th after ``same``.

Run::

    python benchmarks/lab/first_call.py                          # 2 and 4 ranks, numpy backend, 1 MiB, 21 trials
    python benchmarks/lab/first_call.py --ranks 4 --sizes 1M,4M --repeats 41

Writes ``first_call_<n>ranks.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
import report
from cross_memory import contender

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all_gather", "broadcast", "all_to_all")
BEFORE = ("same", "other", "compute", "memory")
CALLS = 4
"""Calls timed one by one after the work before."""
COMPUTE_SECONDS = 3e-3
MEMORY_BYTES = 32 << 20


def compute() -> None:
    """Python arithmetic for :data:`COMPUTE_SECONDS`, on almost no memory."""
    until, total = time.perf_counter() + COMPUTE_SECONDS, 0
    while time.perf_counter() < until:
        total += 1


def calls_one_by_one(world, call, calls: int = CALLS) -> list[float]:
    """A barrier, then ``calls`` calls, each timed alone; per call, the slowest rank's seconds."""
    from mpi4py import MPI

    world.Barrier()
    ends = [time.perf_counter()]
    for _ in range(calls):
        call()
        ends.append(time.perf_counter())
    slowest = np.empty(calls)
    world.Allreduce(np.diff(ends), slowest, op=MPI.MAX)
    return list(slowest)


def trials(world, comm, collective: str, nbytes: int, repeats: int) -> tuple[dict, int]:
    """``(library, before) -> per-call seconds of each trial`` at one collective and size, and how many results
    were wrong."""
    lent = []

    def alloc(count: int) -> np.ndarray:
        lent.append(comm.alloc(count, np.int32))
        return lent[-1]

    made = {"nbcoll": contender(world, comm, collective, nbytes, alloc),
            "MPI": contender(world, None, collective, nbytes, alloc)}  # fmt: skip
    memory = np.ones(MEMORY_BYTES, np.uint8)
    before = {"compute": compute, "memory": memory.sum}
    for call, _ in made.values():  # warm-up: windows, first touch of pages
        for _ in range(CALLS):
            call()
    times: dict[tuple[str, str], list[list[float]]] = {}
    plan = [(library, work) for work in BEFORE for library in made]
    for k in range(repeats):  # each trial rotated by one; what runs just before a timed call is set by ``work``
        for library, work in plan[k % len(plan) :] + plan[: k % len(plan)]:
            other = "MPI" if library == "nbcoll" else "nbcoll"
            if work in before:
                before[work]()
            else:
                for _ in range(CALLS):
                    made[library if work == "same" else other][0]()
            times.setdefault((library, work), []).append(calls_one_by_one(world, made[library][0]))
    wrong = sum(not exact() for _, exact in made.values())
    for buffer in lent:
        comm.free(buffer)
    return times, wrong


def table(times: dict, sizes: list[int], nranks: int, wrong: int, command: str) -> str:
    """The reST table of every collective, size and work before: median microseconds of calls 1, 2 and 4."""
    reading = ("Median time (us) of the 1st, 2nd and 4th call after the work before, the slowest rank's; "
               "*1st / steady*: the 1st call over the 4th after ``same``; results that differ from the exact ones: "
               f"{wrong}. Command: ``{command}``.")  # fmt: skip
    setup = "int32, registered inputs, nbcoll's direct algorithm"
    lines = report.same_run_caption(__file__, nranks, setup, reading)
    rows = []
    for collective in COLLECTIVES:
        for nbytes in sizes:
            median = {key: np.median(np.array(v), axis=0) * 1e6 for key, v in times[(collective, nbytes)].items()}
            for work in BEFORE:
                cells = []
                for library in ("nbcoll", "MPI"):
                    call = median[(library, work)]
                    steady = median[(library, "same")][CALLS - 1]
                    cells += [f"{call[0]:.0f}", f"{call[1]:.0f}", f"{call[CALLS - 1]:.0f}", f"{call[0] / steady:.2f}"]
                rows.append([collective, str(nbytes), work, *cells])
    whats = ("1st", "2nd", "4th", "1st / steady")
    header = ["collective", "size (B)", "before", *(f"{lib} {what}" for lib in ("nbcoll", "MPI") for what in whats)]
    return "\n".join(lines + report.list_table(header, rows, f"first calls, {nranks} ranks")) + "\n"


def compare(args, world, sizes: list[int]) -> int:
    """Every collective, size and work before, in one launch; rank 0 writes the table. 1 if a result was wrong."""
    from nbcoll.comm import init

    comm = init(world)
    times, wrong = {}, 0
    for collective in COLLECTIVES:
        for nbytes in sizes:
            times[(collective, nbytes)], bad = trials(world, comm, collective, nbytes, args.repeats)
            wrong += bad
    comm.destroy()
    n = world.Get_size()
    return report.publish_same_run(world, args, __file__, "first_call",
                                   lambda command, wrong: table(times, sizes, n, wrong, command), wrong)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report.same_run_main(__file__, description, "1M", HERE / "results", compare, argv, repeats=21)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
