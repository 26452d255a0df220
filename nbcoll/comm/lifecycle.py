"""A communicator's life after creation: the communicators it derives, its abort, and its end.

::

    split(color, key), dup()     collective: every rank of this communicator calls, bounded by NBCOLL_TIMEOUT
    shrink(exclude_ranks)        collective over the survivors only; works on an aborted communicator
    abort()                      never blocks: every rank's pending and next operations fail, promptly
    destroy()                    frees connections, shared memory and MPI communicators; idempotent

Every operation first asks whether the communicator is still usable (not destroyed, not aborted here or by a peer,
no peer's refusal of a call this rank ran): the checks live here, beside what sets those states.

Example::

    halves = comm.split(color=comm.rank % 2)
    ...
    survivors = comm.shrink([dead_rank])        # after a CommPeerLostError
    comm.destroy()
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll.comm.bootstrap import release, rendezvous
from nbcoll.comm.errors import CommAbortedError
from nbcoll.comm.watchdog import TAG_ABORT, abort_message_source

if TYPE_CHECKING:
    from nbcoll.comm.communicator import Communicator

NOCOLOR = -1
"""``split(color=NOCOLOR)`` leaves this rank out of every new communicator (NCCL_SPLIT_NOCOLOR)."""


class Lifecycle:
    """Split, dup, shrink, abort and destroy of :class:`~nbcoll.comm.communicator.Communicator` (a mixin).

    Example::

        >>> import nbcoll
        >>> with nbcoll.init() as comm:            # destroyed when the block ends
        ...     other = comm.dup()
        ...     other.destroy()
        >>> comm.closed
        True
    """

    @property
    def closed(self) -> bool:
        """True once :meth:`destroy` has run: every operation then fails.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.closed
        False
        >>> comm.destroy()
        >>> comm.closed
        True
        """
        return self._destroyed

    # -- checks -------------------------------------------------------------------------------------------------

    def aborted_by(self) -> int | None:
        """The rank that aborted this communicator, or ``None``.

        Polls the control page, abort messages, and the peers' refusals: a refusal of a call this rank has run
        aborts the communicator here (see :mod:`.refusal`).

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> print(comm.aborted_by())
        None
        >>> comm.abort()
        >>> comm.aborted_by()
        0
        >>> comm.destroy()
        """
        return self._poll_aborted(probe=True)

    def _poll_aborted(self, probe: bool) -> int | None:
        """:meth:`aborted_by`; with ``probe=False``, without asking MPI whether a note has arrived: the control
        page and the notes already received only (a replayed call's check: :meth:`nbcoll.comm.replay.Replays.start`).
        """
        if self._aborted_by is None and not self._destroyed:
            # One probe for any message (mpi4py's defaults: any source, any tag) answers for both kinds of note
            # below in almost every call, where nothing has arrived; only when something has are they asked apart.
            arrived = probe and self._wiring.ctrl.Iprobe()
            by = self._wiring.control.aborted_by
            if by is None and arrived:
                by = abort_message_source(self._wiring.ctrl)
            if by is not None:
                self._aborted_by = by
                self.log.warn("INIT", f"communicator aborted by rank {by}")
            elif self.engine.refusals.poll(arrived) is not None:
                self.log.warn("INIT", self.engine.refusals.conflict)
                self.abort()
        return self._aborted_by

    def _check_usable(self) -> None:
        if self._destroyed:
            raise ValueError(f"rank {self.rank}: the communicator is destroyed; create a new one")
        try:
            self.watchdog.check_aborted()
        except CommAbortedError as exc:
            conflict = self.engine.refusals.conflict
            if conflict is None:
                raise
            raise CommAbortedError(f"rank {self.rank}: {conflict}") from exc

    # -- new communicators --------------------------------------------------------------------------------------

    def _derive(self, mpi_comm: Any) -> Communicator:
        try:  # a communicator of this one's class (the mixin knows no class of its own: no import of it here)
            return type(self)(mpi_comm, self.config, _node_key=self._wiring.node_key)
        finally:
            mpi_comm.Free()

    def split(self, color: int, key: int = 0) -> Communicator | None:
        """Collective: ranks with the same ``color`` form a new communicator, ordered by ``key`` then rank.

        Returns ``None`` on ranks that pass :data:`NOCOLOR`.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> halves = comm.split(color=comm.rank % 2, key=comm.rank)   # even and odd ranks apart
        >>> halves.size, halves.rank
        (1, 0)
        >>> halves.destroy(); comm.destroy()
        """
        self._check_usable()
        if not isinstance(color, numbers.Integral) or (color < 0 and color != NOCOLOR):
            raise ValueError(f"color: expected an int >= 0 or nbcoll.NOCOLOR, got {color!r}")
        if not isinstance(key, numbers.Integral):
            raise TypeError(f"key: expected an int, got {type(key).__name__}")
        mpi_color = MPI.UNDEFINED if color == NOCOLOR else int(color)
        self._rendezvous("split")
        child = self._wiring.ctrl.Split(mpi_color, int(key))
        if child == MPI.COMM_NULL:
            return None
        return self._derive(child)

    def dup(self) -> Communicator:
        """Collective: a new communicator of the same ranks, with its own connections and counters.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> other = comm.dup()                     # a library can talk on its own copy without mixing messages
        >>> other.size == comm.size, other is comm
        (True, False)
        >>> other.destroy(); comm.destroy()
        """
        self._check_usable()
        self._rendezvous("dup")
        return self._derive(self._wiring.ctrl.Dup())

    def _rendezvous(self, what: str) -> None:
        """Wait, bounded, for every rank to reach ``what``: MPI's Split and Dup block where nothing can stop them."""

        def check() -> None:
            self.watchdog.check_aborted()
            self.watchdog.check_peer_processes(what)

        try:
            rendezvous(self._wiring.ctrl, f"{what} of {self!r}", self.config.timeout, check)
        except BaseException:
            self.watchdog.failed = True  # its barrier stays pending on the MPI communicator
            raise

    def shrink(self, exclude_ranks: Iterable[int]) -> Communicator:
        """A new communicator of every rank but ``exclude_ranks``, built without them.

        Collective over the surviving ranks only: the excluded ones may be dead or stuck. It works on an
        aborted communicator, which is the usual way to continue after a failure.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> survivors = comm.shrink(exclude_ranks=[])      # after a failure: comm.shrink([dead_rank])
        >>> survivors.size
        1
        >>> survivors.destroy(); comm.destroy()
        """
        if self._destroyed:
            raise ValueError(f"rank {self.rank}: the communicator is destroyed; shrink it before destroying it")
        excluded = sorted({self._check_rank(r) for r in exclude_ranks})
        if self.rank in excluded:
            raise ValueError(f"exclude_ranks: this rank ({self.rank}) is excluded; only survivors call shrink")
        group = self._wiring.ctrl.Get_group()
        survivors = group.Excl(excluded)
        try:
            child = self._wiring.ctrl.Create_group(survivors, tag=TAG_ABORT + 1)
        finally:
            survivors.Free()
            group.Free()
        return self._derive(child)

    def _check_rank(self, r: Any) -> int:
        if not isinstance(r, numbers.Integral) or not 0 <= r < self.size:
            raise ValueError(f"exclude_ranks: {r!r} is not a rank of this communicator of {self.size} ranks")
        return int(r)

    # -- ending -------------------------------------------------------------------------------------------------

    def abort(self) -> None:
        """Make every pending and future operation of this communicator fail, on every rank, promptly.

        Sets the abort flag that ranks on this machine poll, and sends an abort message to the others.
        Never blocks.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.abort()                           # every rank's pending and next operations fail
        >>> try:
        ...     comm.barrier()
        ... except nbcoll.CommAbortedError:
        ...     print("aborted")
        aborted
        >>> comm.destroy()
        """
        if self._destroyed or self._aborted_by is not None:
            return
        self._aborted_by = self.rank
        self._wiring.control.set_aborted(self.rank)
        for peer in range(self.size):
            if peer != self.rank and not self.topology.same_machine(peer):
                empty = np.empty(0, np.uint8)
                self._abort_requests.append(self._wiring.ctrl.Isend([empty, MPI.BYTE], dest=peer, tag=TAG_ABORT))
        self.log.warn("INIT", "communicator aborted by this rank")

    def destroy(self) -> None:
        """Free the connections, the shared memory and the MPI communicators of this rank. Idempotent.

        Async operations still in flight complete first, for at most ``NBCOLL_TIMEOUT`` seconds; after that the
        communicator is aborted, and whatever has not run fails.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.destroy()
        >>> comm.destroy()                         # a second call does nothing
        >>> comm.closed
        True
        """
        if self._destroyed:
            return
        progress = self.engine.progress
        if not progress.quiesce(self.config.timeout):
            self.abort()  # releases the running operation at its next check
            progress.cancel(CommAbortedError(f"rank {self.rank}: the communicator was destroyed before it ran"))
            progress.quiesce(self.config.timeout)
        self._destroyed = True
        self.engine.close()
        for conn in [*self._wiring.send.values(), *self._wiring.recv.values()]:
            conn.close()
        self._wiring.control.close()
        # Abort messages are empty and sent eagerly: they complete on their own, so they are simply dropped.
        self._abort_requests.clear()
        if not MPI.Is_finalized():
            release(self._wiring, failed=self.watchdog.failed or self._aborted_by is not None)

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()
