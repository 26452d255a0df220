"""A loopback world: n ranks as n threads of this process, each with a real communicator, and no MPI job.

Every collective algorithm, primitive and FIFO runs exactly as under ``mpiexec``; only the wiring underneath is
in-process (:mod:`nbcoll.comm.inprocess`): control messages go through queues (:mod:`nbcoll.comm.fabric`), and
the FIFOs, the control page and the direct windows are arrays all threads see instead of ``/dev/shm`` segments.
So an algorithm can be stepped in a notebook or a docs page, and tests of what algorithms compute run without
launching processes.
Settings that shape the wiring work too: ``CommConfig(transport="mpi")`` moves every chunk through the MPI
transport's staged, synchronous sends (here between threads), and ``ranks_per_node=2`` pretends nodes.

Each :meth:`Loopback.run` calls a function on every rank at once, one thread per rank, and returns the results in
rank order. Each rank draws its random numbers (parameters, dropout masks) from a copy of the caller's generator
(:func:`nbcoll.seed.rank_state`), as each process under ``mpiexec`` draws from its own. When one rank raises, the
others are released at once (its communicator is aborted, and any wait inside the wiring ends), and ``run``
raises that first error, with the others' errors as notes.

Example (each call runs on every rank; ``comm.rank`` tells them apart)::

    >>> import numpy as np
    >>> from nbcoll.comm import loopback
    >>> sums = loopback.run(4, lambda comm: comm.all_reduce(np.arange(3) + 10 * comm.rank))
    >>> sums[2]
    array([60, 64, 68])

A world keeps its communicators between calls, so an algorithm can be run one collective at a time and looked
at in between (a ring all-reduce sends 2(n-1)/n of the buffer from every rank: 4/3 x 48 = 64 bytes here)::

    >>> with loopback(3) as world:
    ...     outs = world.run(lambda comm: comm.all_reduce(np.ones(6, np.int64), algo="ring"))
    ...     print(outs[0], [comm.counters.bytes_sent for comm in world])
    ...     print(world.run(lambda comm: comm.split(color=comm.rank % 2).size))
    [3 3 3 3 3 3] [64, 64, 64]
    [2, 1, 2]

It runs on the ``numpy`` and ``sim`` backends. The threads share the GIL and, on ``sim``, take turns launching
kernels: a loopback world shows what an algorithm computes and sends, not how fast it runs across processes.
"""

from __future__ import annotations

import numbers
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nbcoll import backend, seed
from nbcoll.comm.communicator import Communicator
from nbcoll.comm.config import CommConfig
from nbcoll.comm.errors import CommAbortedError, CommTimeoutError

JOIN_GRACE_SECONDS = 30.0
"""How long past ``NBCOLL_TIMEOUT`` a run waits for rank threads before it gives up on them."""


class Loopback:
    """The communicators of ``nranks`` ranks that are threads of this process.

    Example:

    >>> import numpy as np
    >>> import nbcoll
    >>> with nbcoll.comm.loopback(3) as world:
    ...     outs = world.run(lambda comm: comm.all_gather(np.full(2, comm.rank, np.int32), np.zeros(6, np.int32)))
    ...     print(outs[0], world.size, world[1].rank)
    [0 0 1 1 2 2] 3 1

    Building it is collective over its threads, as :func:`nbcoll.init` is over MPI ranks; ``close()`` destroys
    every communicator. After a failed :meth:`run` the communicators are aborted: make a new world.
    """

    def __init__(self, nranks: int, config: CommConfig | None = None) -> None:
        if not isinstance(nranks, numbers.Integral) or isinstance(nranks, bool) or nranks < 1:
            raise ValueError(f"nranks: expected an int >= 1, got {nranks!r}")
        if config is not None and not isinstance(config, CommConfig):
            raise TypeError(f"config: expected a CommConfig or None, got {type(config).__name__}")
        if backend.get_backend() == "cuda":
            raise backend.BackendError(
                "loopback: ranks that are threads of one process run on the 'numpy' and 'sim' backends only (on "
                "'cuda' each rank wants a GPU of its own and its peers' memory over CUDA IPC); use "
                "nbcoll.use_backend('numpy'), or start the ranks with mpiexec"
            )
        self.config = config or CommConfig.from_env()
        self.size = int(nranks)
        # The in-process wiring subclasses mpi4py's Request, so it is imported here: `import nbcoll.comm`
        # works without mpi4py, and only a loopback world needs it.
        from nbcoll.comm.fabric import Fabric
        from nbcoll.comm.inprocess import ThreadComm

        self._fabric = Fabric(self.size, self.config.timeout)
        self.comms: list[Communicator | None] = [None] * self.size
        world = [ThreadComm(self._fabric, ("world", id(self)), rank, self.size) for rank in range(self.size)]

        def build(comm: None, rank: int) -> Communicator:
            self.comms[rank] = Communicator(world[rank], self.config)
            return self.comms[rank]

        try:
            self._on_every_rank(build, "creating the loopback communicators")
        except BaseException:
            for comm in self.comms:
                if comm is not None:
                    comm.destroy()
            raise
        self._closed = False

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, rank: int) -> Communicator:
        return self.comms[rank]

    def __iter__(self) -> Iterator[Communicator]:
        return iter(self.comms)

    def __repr__(self) -> str:
        return f"Loopback(nranks={self.size}, {'closed' if self._closed else 'open'})"

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``[fn(comm, *args) for comm in world]``, each call on its own thread, all at once; the results by rank.

        >>> with loopback(2) as world:
        ...     world.run(lambda comm, base: base + comm.rank, 10)
        [10, 11]
        """
        if not callable(fn):
            raise TypeError(f"fn: expected a function of the communicator, got {type(fn).__name__}")
        if self._closed:
            raise ValueError("run: this loopback world is closed; make a new one with nbcoll.comm.loopback(n)")
        return self._on_every_rank(lambda comm, rank: fn(comm, *args), getattr(fn, "__name__", "fn"))

    def _on_every_rank(self, call: Callable[[Any, int], Any], what: str) -> list[Any]:
        results: list[Any] = [None] * self.size
        errors: list[tuple[float, int, BaseException]] = []
        # Each rank draws from its own copy of the caller's generator, as each process of an MPI job draws from
        # its own: the same seed gives every rank the same parameters, whatever order the threads run in.
        start = seed.snapshot()

        def body(rank: int) -> None:
            try:
                with seed.rank_state(start):
                    results[rank] = call(self.comms[rank], rank)
            except BaseException as exc:
                errors.append((time.monotonic(), rank, exc))
                self._release_others(rank, exc)

        threads = [
            threading.Thread(target=body, args=(rank,), name=f"nbcoll-loopback-rank{rank}", daemon=True)
            for rank in range(self.size)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + self.config.timeout + JOIN_GRACE_SECONDS
        try:
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:  # interrupted at the prompt: release the ranks rather than leave them waiting
            self._fabric.fail("the caller was interrupted")
            for comm in self.comms:
                if comm is not None:
                    comm.abort()
            raise
        stuck = [rank for rank, thread in enumerate(threads) if thread.is_alive()]
        if stuck:
            self._fabric.fail(f"ranks {stuck} did not return")
            raise CommTimeoutError(
                f"loopback: {what} did not return on rank(s) {stuck} within {self.config.timeout:g} s "
                f"(NBCOLL_TIMEOUT) + {JOIN_GRACE_SECONDS:g} s; their threads are left running"
            )
        if errors:
            raise _first_cause(errors)
        return results

    def _release_others(self, rank: int, exc: BaseException) -> None:
        """Rank ``rank`` failed: end every wait of the other ranks, in the wiring and in their operations."""
        self._fabric.fail(f"rank {rank} of the loopback world raised {type(exc).__name__}: {exc}".splitlines()[0])
        comm = self.comms[rank]
        if comm is not None:
            comm.abort()  # the others' operations see the abort flag within a poll

    def close(self) -> None:
        """Destroy every rank's communicator (on its own thread, as a rank would). Idempotent.

        >>> world = loopback(2)
        >>> world.close()
        >>> world.close()  # a second close does nothing
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._on_every_rank(lambda comm, rank: comm.destroy(), "destroy")

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _first_cause(errors: list[tuple[float, int, BaseException]]) -> BaseException:
    """The error that started it: the earliest one that is not an abort caused by another rank's failure."""
    errors.sort(key=lambda e: e[0])
    causes = [e for e in errors if not isinstance(e[2], CommAbortedError)] or errors
    _, rank, first = causes[0]
    first.add_note(f"(raised on rank {rank} of the loopback world)")
    for _, other, exc in errors:
        if exc is not first:
            headline = str(exc).splitlines()[0] if str(exc) else ""
            first.add_note(f"rank {other} then raised {type(exc).__name__}: {headline}")
    return first


def loopback(nranks: int, config: CommConfig | None = None) -> Loopback:
    """``nranks`` communicators whose ranks are threads of this process (see :class:`Loopback`).

    >>> import numpy as np
    >>> with loopback(2) as world:
    ...     print(world.run(lambda comm: comm.all_reduce(np.array([comm.rank + 1]))))
    [array([3]), array([3])]
    """
    return Loopback(nranks, config)


def run(nranks: int, fn: Callable[..., Any], *args: Any, config: CommConfig | None = None) -> list[Any]:
    """Make a loopback world of ``nranks``, return ``[fn(comm, *args) for each rank]``, and destroy it."""
    with Loopback(nranks, config) as world:
        return world.run(fn, *args)


loopback.run = run  # type: ignore[attr-defined]  # nbcoll.comm.loopback.run(4, fn) reads as this module's run
