"""The message exchange that sets the direct windows up: every rank's value, sent to every peer, never blocking.

:class:`Exchange` is an operation the watchdog drives (:mod:`nbcoll.comm.watchdog`), so a rank that waits for a
peer that never comes times out naming it; :mod:`nbcoll.comm.window` runs one for each step of a set-up (the
handles, the "mapped" confirmations, the cross-memory probes). Point-to-point messages rather than a collective, so
that a rank that waits knows which peers are late.

Example::

    op = Exchange(ctrl, uid, value, "handles", recorder.record("window_setup", -1, 0, "handles"))
    watchdog.drive([op])
    op.values                       # {rank: value} for every rank
"""

from __future__ import annotations

from typing import Any

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll.comm.debug import OperationRecord

TAG_WINDOWS = 91
"""Tag of the setup messages on the control communicator, apart from the others there (77 the abort message,
78 shrink's, and the few after them)."""


class Exchange:
    """Sends one value to every peer and receives theirs, never blocking: an operation the watchdog drives.

    >>> Exchange.kind
    'collective'
    """

    kind = "collective"

    def __init__(self, mpi_comm: Any, uid: int, value: Any, what: str, record: OperationRecord, call: str = "") -> None:
        self.mpi_comm, self.uid, self.what, self.record, self.call = mpi_comm, uid, what, record, call
        self.rank, self.nranks = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.others = [p for p in range(self.nranks) if p != self.rank]
        self.values: dict[int, Any] = {self.rank: value}
        self.sends = [mpi_comm.isend((uid, what, value), dest=p, tag=TAG_WINDOWS) for p in self.others]
        self.step = 0
        self.done = False

    @property
    def conn(self) -> Exchange:
        return self

    @property
    def peer(self) -> int:
        late = self.waiting_peers()
        return late[0] if late else -1

    def waiting_peers(self) -> list[int]:
        return [p for p in self.others if p not in self.values]

    def progress(self) -> bool:
        moved = False
        for p in self.waiting_peers():
            while p not in self.values and self.mpi_comm.Iprobe(source=p, tag=TAG_WINDOWS):
                uid, what, value = self.mpi_comm.recv(source=p, tag=TAG_WINDOWS)  # arrived: returns at once
                if (uid, what) == (self.uid, self.what):  # else left over from an earlier communicator's setup
                    self.values[p] = value
                    self.step += 1
                    moved = True
        if not self.waiting_peers() and MPI.Request.Testall(self.sends):
            self.done = True
            self.record.finish()
            moved = True
        return moved

    def headline(self) -> str:
        return f"direct window setup ({self.what})" + (f" for {self.call}" if self.call else "")

    def describe(self) -> str:
        return f"{self.headline()}: heard from {len(self.values)} of {self.nranks} ranks"

    def waiting_for(self) -> str:
        late = self.waiting_peers()
        if late:
            return f"ranks {late} to reach their first one-shot collective on this communicator"
        return "this rank's messages to be delivered"
