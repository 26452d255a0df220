"""The measuring loop of the perf tool: for every algorithm, type, op and size, time the collective
out-of-place and in-place, then check the result exactly.

As nccl-tests does: ``warmup`` calls, a barrier, ``iters`` calls back to back timed by the host clock (after
the device has finished), the time per call combined over ranks by ``average`` (avg, min, max or rank 0's),
then, with ``check``, fresh inputs, one more call and a count of the elements that differ from the exact
answer, summed over ranks.

Example::

    options = Options("all_reduce", sizes=size_sweep(8, 1 << 20, 4), iters=20, warmup=5)
    rows = run(comm, MPI.COMM_WORLD, options)          # every rank gets the same rows
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from nbcoll import backend
from nbcoll.comm import algorithms
from nbcoll.perf import bandwidth, cases
from nbcoll.perf.table import Measurement, Row

AVERAGES = ("rank0", "avg", "min", "max")
"""How ``-a`` combines the ranks' times; nccl-tests numbers them 0 to 3 and defaults to 1 (avg)."""

LONG_SWEEP = 20
"""Sweeps of at least this many tests show progress lines unless told not to."""

P2P_ALGO = "p2p"
"""The label of sendrecv, which has no algorithm to choose."""


@dataclass
class Options:
    """What to measure (the command line's options, parsed and checked).

    >>> from nbcoll.perf import Options, size_sweep
    >>> options = Options("all_gather", sizes=size_sweep(8, 1 << 20, 4), iters=20, warmup=5, algos=["ring"])
    >>> len(options.sizes), options.ops, options.dtypes
    (9, ['sum'], [dtype('float32')])
    >>> Options("all_to_al", sizes=[8])
    Traceback (most recent call last):
        ...
    ValueError: collective: unknown 'all_to_al'; expected one of all_reduce, ...
    """

    collective: str
    sizes: list[int]
    iters: int = 20
    warmup: int = 5
    check: int = 1
    ops: list[str] = field(default_factory=lambda: ["sum"])
    dtypes: list[np.dtype] = field(default_factory=lambda: [np.dtype(np.float32)])
    root: int = 0
    average: str = "avg"
    algos: list[str | None] = field(default_factory=lambda: [None])
    progress: bool | None = None  # None: on for sweeps of at least LONG_SWEEP tests

    def __post_init__(self) -> None:
        if self.collective not in bandwidth.COLLECTIVES:
            raise ValueError(
                f"collective: unknown {self.collective!r}; expected one of {', '.join(bandwidth.COLLECTIVES)}"
            )
        if self.iters < 1:
            raise ValueError(f"-n: iterations must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise ValueError(f"-w: warm-up iterations must be >= 0, got {self.warmup}")
        if self.average not in AVERAGES:
            raise ValueError(f"-a: expected one of {', '.join(AVERAGES)} (or 0-3), got {self.average!r}")
        if self.collective not in bandwidth.REDUCING:
            self.ops = ["sum"]  # the op only shapes the inputs here; the table prints "none"
        if self.collective == "sendrecv":
            self.algos = [None]


def algorithms_of(collective: str, requested: str | None) -> list[str | None]:
    """``--algo``: ``None`` (the tuner picks), ``"all"``, or a comma-separated list, checked against the table."""
    if collective == "sendrecv":
        return [None]
    if requested is None or requested.strip() == "":
        return [None]
    if requested.strip().lower() == "all":
        return list(algorithms.ALGORITHMS[collective])
    names = [a.strip() for a in requested.split(",") if a.strip()]
    for name in names:
        algorithms.check_algo(collective, name)
    return names


def _synchronize() -> None:
    if backend.get_backend() == "cuda":
        backend.cuda().synchronize()


def _combine(mpi_comm: MPI.Comm, seconds: float, average: str) -> float:
    if average == "rank0":
        return mpi_comm.bcast(seconds, root=0)
    if average == "min":
        return mpi_comm.allreduce(seconds, op=MPI.MIN)
    if average == "max":
        return mpi_comm.allreduce(seconds, op=MPI.MAX)
    return mpi_comm.allreduce(seconds, op=MPI.SUM) / mpi_comm.Get_size()


def time_calls(call: Callable[[], Any], mpi_comm: MPI.Comm, iters: int, warmup: int) -> float:
    """Seconds per call on this rank: ``warmup`` untimed calls, a barrier, then ``iters`` timed back to back."""
    for _ in range(warmup):
        call()
    _synchronize()
    mpi_comm.Barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    _synchronize()
    return (time.perf_counter() - start) / iters


def measure(comm: Any, mpi_comm: MPI.Comm, options: Options, case: cases.Case, nbytes: int) -> Measurement:
    """Time one case and check it; every rank returns the same numbers."""
    seconds = _combine(mpi_comm, time_calls(case.call, mpi_comm, options.iters, options.warmup), options.average)
    wrong = None
    if options.check:
        mine = 0
        for _ in range(options.check):
            case.refill()
            case.call()
            _synchronize()
            mine += case.wrong()
        wrong = mpi_comm.allreduce(mine, op=MPI.SUM)
    algbw, busbw = bandwidth.bandwidths(options.collective, nbytes, seconds, comm.size)
    return Measurement(seconds, algbw, busbw, wrong)


def check_root(options: Options, nranks: int) -> None:
    """``-r`` must name a rank of the communicator (for the collectives that have a root)."""
    if options.collective in bandwidth.ROOTED and not 0 <= options.root < nranks:
        raise ValueError(f"-r: root {options.root} is out of range for {nranks} ranks")


def tests(options: Options) -> Iterator[tuple[str | None, np.dtype, str, int]]:
    """Every ``(algo, dtype, op, size)`` of the sweep, in the order the table prints them."""
    for algo in options.algos:
        for dtype in options.dtypes:
            for op in options.ops:
                for nbytes in options.sizes:
                    yield algo, dtype, op, nbytes


class ProgressBar:
    """``# [########............] 40% 22/55 tests, 12 s elapsed, about 18 s left`` at every tenth of a sweep.

    Comment lines on standard output rather than a bar redrawn in place: under ``mpiexec`` a rank's output is a
    pipe, not a terminal, and a line that starts with ``#`` is skipped by anything that reads the table.
    """

    def __init__(self, total: int, enabled: bool, width: int = 20) -> None:
        self.total, self.enabled, self.width, self.done = total, enabled and total > 1, width, 0
        self.started = time.monotonic()
        self.shown = 0

    def step(self) -> None:
        self.done += 1
        tenth = 10 * self.done // self.total
        if not self.enabled or tenth <= self.shown or self.done == self.total:
            return
        self.shown = tenth
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        print(
            f"# [{bar}] {100 * self.done // self.total}% {self.done}/{self.total} tests, "
            f"{elapsed:.0f} s elapsed, about {left:.0f} s left",
            flush=True,
        )


def run(
    comm: Any, mpi_comm: MPI.Comm, options: Options, on_row: Callable[[Row, str | None], None] | None = None
) -> list[Row]:
    """Measure every test of ``options``; ``on_row(row, algo)`` is called as each row is ready.

    >>> import nbcoll
    >>> from mpi4py import MPI
    >>> from nbcoll.perf import Options, run
    >>> comm = nbcoll.init()                    # one rank here; under mpiexec -n 4, four
    >>> rows = run(comm, MPI.COMM_WORLD, Options("all_reduce", sizes=[8, 1024], iters=2, warmup=1))
    >>> [(r.nbytes, r.count, r.dtype, r.out_of_place.wrong) for r in rows]      # every rank gets the same rows
    [(8, 2, 'float32', 0), (1024, 256, 'float32', 0)]
    >>> comm.destroy()
    """
    n = comm.size
    coll = options.collective
    rooted = coll in bandwidth.ROOTED
    check_root(options, n)
    planned = list(tests(options))
    # The simulator spends seconds on a single test, so its sweeps always report progress.
    long_sweep = len(planned) >= LONG_SWEEP or backend.get_backend() == "sim"
    show = options.progress if options.progress is not None else long_sweep
    progress = ProgressBar(len(planned), show and comm.rank == 0)
    rows = []
    for algo, dtype, op, nbytes in planned:
        count = bandwidth.block_count(coll, nbytes, dtype, n)
        size = bandwidth.total_bytes(coll, count, dtype, n)
        root = options.root if rooted else -1
        measured = []
        for inplace in (False, True):
            if inplace and coll in cases.INPLACE_UNSUPPORTED:
                measured.append(None)
                continue
            case = cases.build_case(comm, coll, algo, op, dtype, count, max(root, 0), inplace)
            measured.append(measure(comm, mpi_comm, options, case, size))
        label = algo or (P2P_ALGO if coll == "sendrecv" else "auto")
        redop = op if coll in bandwidth.REDUCING else "none"
        new = Row(
            coll, label, size, count * (n if coll in bandwidth.BLOCKED else 1), dtype.name, redop, root, *measured
        )
        rows.append(new)
        if on_row is not None:
            on_row(new, algo)
        progress.step()
    return rows
