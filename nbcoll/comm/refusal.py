"""Refusals: a collective that some ranks refuse (their arguments fail the checks) while others may run it.

Argument checks are local: the root alone knows that its ``recvbuf`` is missing, a rank alone that its output
buffer is read-only. A rank that refuses a call raises at once, but its peers may already be running that
call: their chunks then wait in this rank's connections, and the next collective would read them as its own
and return a wrong result. So every rank numbers its collective calls the same way, refused or not, and a
rank that refuses call ``#s`` tells every peer in a small message. Then:

* every rank refused ``#s`` (the same bad argument everywhere): each hears from all the others, nothing moved
  anywhere, and the communicator stays usable;
* some rank runs ``#s``: when it hears of the refusal it aborts the communicator, so every rank's next operation
  raises :class:`~nbcoll.comm.errors.CommAbortedError` at once instead of a wrong result or a timeout.

A refusing rank learns which of the two happened at its next operation (:meth:`Refusals.settle`), which waits
for the peers' word at most ``NBCOLL_TIMEOUT``. A rank hears of refusals whenever it checks for an abort: at the
start of each operation and while it waits for a peer.

With ``NBCOLL_CHECK=1`` a refusal travels in the signature exchange instead, and every rank raises together
(:mod:`nbcoll.comm.check`); :meth:`Refusals.skipped` records such a call, which no rank runs.

The communicator's engine numbers every call and refuses those whose checks fail
(:meth:`nbcoll.comm.engine.Engine.call`). Example::

    seq = refusals.number()           # every collective call, on every rank
    try:
        check_arguments()
    except ValueError:
        refusals.refuse(seq, "gather")  # tell the peers, then raise
        raise
    refusals.ran(seq)                 # raises CommAbortedError if a peer already refused it
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll.comm.errors import CommAbortedError
from nbcoll.comm.watchdog import TAG_ABORT

TAG_REFUSED = TAG_ABORT + 2
"""Tag of a refusal note on the control communicator (``TAG_ABORT + 1`` is shrink's)."""


class Refusals:
    """The refusal notes of one communicator on one rank: sent, received, and what they mean here."""

    def __init__(self, ctrl: MPI.Comm, timeout: float) -> None:
        self._ctrl = ctrl
        self._rank, self._size = ctrl.Get_rank(), ctrl.Get_size()
        # MPI reuses a freed communicator's context for a new one, so a note that arrives after its communicator
        # was destroyed could reach the next one: every note carries its communicator's random identity.
        self._identity = ctrl.bcast(secrets.randbits(62) if self._rank == 0 else None, root=0)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._calls = 0  # collective calls numbered so far
        self._open: set[int] = set()  # numbered, but not yet run or refused here (being checked, or in a group)
        self._mine: dict[int, str] = {}  # refused here, waiting for every peer's word
        self._heard: dict[int, set[int]] = {}  # call -> peers that refused it
        self._setting_up: set[int] = set()  # open calls whose plan waits in a collective set-up (the windows)
        self._sends: list[tuple[MPI.Request, np.ndarray]] = []
        self.conflict: str | None = None  # why this communicator must be aborted, once known

    @property
    def calls(self) -> int:
        """How many collective calls were numbered so far."""
        return self._calls

    def number(self) -> int:
        """The number of a new collective call, the same on every rank."""
        with self._lock:
            self._calls += 1
            self._open.add(self._calls)
            return self._calls

    def is_open(self, seq: int) -> bool:
        with self._lock:
            return seq in self._open

    def refuse(self, seq: int, what: str) -> None:
        """This rank will not run call ``seq``: tell every peer, without waiting."""
        note = np.array([self._identity, seq], np.int64)
        with self._lock:
            self._open.discard(seq)
            self._mine[seq] = what
            self._sends = [(request, buf) for request, buf in self._sends if not request.Test()]
            for peer in range(self._size):
                if peer != self._rank:  # the note's array lives as long as its send
                    self._sends.append((self._ctrl.Isend([note, MPI.INT64_T], dest=peer, tag=TAG_REFUSED), note))

    def skipped(self, seq: int) -> None:
        """No rank runs call ``seq``, and every rank knows it (the ``NBCOLL_CHECK`` exchange said so)."""
        with self._lock:
            self._open.discard(seq)
            self._heard.pop(seq, None)

    def ran(self, seq: int) -> None:
        """This rank runs call ``seq``; raise :class:`CommAbortedError` if a peer has already refused it."""
        with self._lock:
            self._open.discard(seq)
            conflict = self._conflict_if_refused(seq)
        self._raise(conflict)

    def number_run(self) -> int:
        """:meth:`number` and :meth:`ran` at once, under one lock: a call with no checks left to fail (a replay)."""
        with self._lock:
            self._calls += 1
            seq = self._calls
            conflict = self._conflict_if_refused(seq)
        self._raise(conflict)
        return seq

    def _conflict_if_refused(self, seq: int) -> str | None:
        """(Under the lock.) This rank runs ``seq``: a peer's refusal of it is a conflict. The conflict, if any."""
        if seq in self._heard:
            self._note_conflict(seq)
        return self.conflict

    def _raise(self, conflict: str | None) -> None:
        if conflict is not None:
            raise CommAbortedError(f"rank {self._rank}: {conflict}")

    def poll(self, arrived: bool = True) -> str | None:
        """Receive the notes that have arrived; return why the communicator must be aborted, if it must.

        ``arrived=False``: the caller has just probed for any message and found none, so this one need not probe.
        """
        quiet = self.conflict is None and not self._setting_up
        if quiet and (not arrived or not self._ctrl.Iprobe(MPI.ANY_SOURCE, TAG_REFUSED)):
            return None  # nothing has arrived, the case of almost every call: one probe, no lock
        with self._lock:
            for peer, seq in self._receive():
                self._heard.setdefault(seq, set()).add(peer)
                if seq <= self._calls and seq not in self._open and seq not in self._mine:
                    self._note_conflict(seq)  # this rank ran (or queued) the call the peer refused
            for seq in self._setting_up & self._heard.keys():
                self._note_conflict(seq)  # the refuser never joins the set-up this rank waits in for that call
            return self.conflict

    @contextlib.contextmanager
    def setting_up(self, seq: int) -> Iterator[None]:
        """While open call ``seq`` waits in a collective set-up (the first one-shot call sets the windows up), a
        peer's refusal of it is a conflict: the refuser will never join, so waiting would only end at the timeout.
        """
        with self._lock:
            self._setting_up.add(seq)
        try:
            yield
        finally:
            with self._lock:
                self._setting_up.discard(seq)

    def _receive(self) -> list[tuple[int, int]]:
        """Every note of this communicator that has arrived, as (peer, call); notes of an older one are dropped."""
        status, note, notes = MPI.Status(), np.empty(2, np.int64), []
        while (message := self._ctrl.Improbe(MPI.ANY_SOURCE, TAG_REFUSED, status)) is not None:
            message.Recv([note, MPI.INT64_T])
            if note[0] == self._identity:
                notes.append((status.Get_source(), int(note[1])))
        return notes

    def _note_conflict(self, seq: int) -> None:
        if self.conflict is None:
            peers = ", ".join(str(p) for p in sorted(self._heard[seq]))
            self.conflict = (
                f"collective call #{seq} on this communicator was refused by rank(s) {peers} (its arguments failed "
                "the checks there) but run by this rank; the communicator is aborted so that no later call reads "
                "data left behind. Create a new communicator"
            )

    @property
    def unsettled(self) -> bool:
        """Whether this rank refused a call that some peer has not yet been heard to refuse (:meth:`settle` waits)."""
        return bool(self._mine)

    def settle(self, check_aborted: Callable[[], None]) -> None:
        """Before this rank's next operation: wait until every peer refused what this rank refused, or abort.

        Raises :class:`CommAbortedError` when some peer ran a call this rank refused (it aborts the communicator
        on hearing of it), or when a peer says nothing for ``NBCOLL_TIMEOUT`` seconds.
        """
        if not self._mine:
            return
        deadline = time.monotonic() + self._timeout
        while True:
            self.poll()
            with self._lock:
                peers = self._size - 1
                for seq in [s for s in self._mine if len(self._heard.get(s, ())) == peers]:
                    del self._mine[seq]
                    self._heard.pop(seq, None)  # a communicator of one rank hears from nobody
                waiting = dict(self._mine)
            if not waiting:
                return
            try:
                check_aborted()  # a peer that ran a refused call aborts the communicator
            except CommAbortedError as exc:
                seq, what = next(iter(waiting.items()))
                raise CommAbortedError(
                    f"rank {self._rank}: {what} (collective call #{seq}) was refused by this rank but run by another, "
                    "which aborted the communicator so that no later call reads data left behind. Create a new one"
                ) from exc
            if time.monotonic() > deadline:
                seq, what = next(iter(waiting.items()))
                missing = sorted(set(range(self._size)) - {self._rank} - self._heard.get(seq, set()))
                self.conflict = (
                    f"{what} (collective call #{seq}) was refused by this rank, and rank(s) "
                    f"{', '.join(map(str, missing))} did not refuse it within {self._timeout:g} s (NBCOLL_TIMEOUT); "
                    "their data may be left in the connections, so the communicator is aborted. Create a new one"
                )
                raise CommAbortedError(f"rank {self._rank}: {self.conflict}")
            time.sleep(1e-3)

    def close(self) -> None:
        """Receive the notes that have arrived, so none is left for a later communicator, and drop the sends."""
        with self._lock:
            self._receive()
            self._sends.clear()  # small and sent eagerly, they complete on their own
