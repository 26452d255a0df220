"""Direct windows: every rank of a machine maps every other rank's buffer, so a one-shot step reads peers in place.

A FIFO moves data by copying it into the receiver's slot. NCCL's one-shot all-reduce skips that: each GPU reads
its peers' buffers directly over NVLink. Here each rank owns a *window* (an IPC-exportable buffer of
``NBCOLL_BUFFSIZE`` bytes) that all ranks of the machine have mapped, and two rows of flags in a shared host page::

    posted[r]   the last round whose data rank r has written into its window      (written by r only)
    done[r]     the last round in which rank r has finished reading every window   (written by r only)

One round of a one-shot collective, on every rank ``r``::

    wait until done[p] >= round - 1 for every peer p      # nobody still reads what we are about to overwrite
    window[r] = our chunk;  posted[r] = round
    wait until posted[p] >= round for every peer p        # every peer's chunk is in its window
    out = fold(window[0], ..., window[n-1])  (or copy each peer's window into its block)
    done[r] = round

Both waits are steps, so the communicator's watchdog bounds them like every other wait. Windows need every rank
on one machine with the ipc transport; elsewhere the direct algorithms use the FIFOs instead.

Setting the windows up is collective too, and bounded the same way: each rank creates its own window (rank 0 also
the flags), the handles go to every peer in non-blocking messages that the watchdog polls (timeout, abort, dead
peer), each rank maps the others' windows, a second exchange says everyone has, and only then does each owner
remove its names from ``/dev/shm``. A failure anywhere (a rank that never comes, one that dies, an error while
mapping) closes whatever was made, and so unlinks every name at once: nothing waits inside MPI, where neither the
timeout nor a ``SIGTERM`` handler could run.

Example::

    windows = DirectWindows(mpi_comm, nbytes=1 << 20, drive=watchdog.drive, recorder=recorder)
    prims = Prims(x, out, op="sum", windows=windows)
    steps = [prims.direct_send(0, 64), prims.direct_recv_reduce_copy(0, 64)]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll.comm.bootstrap import shared_memory_of
from nbcoll.comm.connection import copy_device, synchronize
from nbcoll.comm.debug import FlightRecorder, OperationRecord
from nbcoll.comm.primitives import Flag, name_of
from nbcoll.ipc_memory import IpcBuffer
from nbcoll.kernels import combine as combine_kernels

TAG_WINDOWS = 91
"""Tag of the setup messages on the control communicator, apart from the others there (77 the abort message,
78 shrink's, and the few after them)."""


@dataclass
class _Peer:
    """Stands for a peer in traces, where a FIFO step would name its connection."""

    peer: int


class DirectWindows:
    """The windows of every rank of a communicator that lives on one machine, and their flags."""

    def __init__(
        self, mpi_comm: Any, nbytes: int, drive: Callable[[list[Any]], None], recorder: FlightRecorder, uid: int = 0
    ) -> None:
        """Collective over ``mpi_comm``; ``drive([op])`` runs an operation to its end under the watchdog.

        ``uid`` is the communicator's own number: a message that lacks it was meant for an earlier communicator.
        """
        self.rank, self.nranks = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.nbytes = nbytes
        self.rounds = 0
        memory = shared_memory_of(mpi_comm)  # IPC buffers, or plain arrays when the ranks are threads
        own: list[IpcBuffer] = []  # created here: unlinked once every peer has them mapped
        mapped: dict[int, IpcBuffer] = {}  # every rank's window, and the flags (key -1), as this rank sees them
        try:
            problem = ""
            try:
                own.append(memory.create(nbytes, np.uint8, tag=f"win{self.rank}"))
                if self.rank == 0:
                    own.append(memory.create((2, self.nranks), np.int64, tag="winflags", host=True))
                    own[1].array[:] = 0  # zeroed before its handle leaves this rank
            except Exception as exc:
                problem = f"rank {self.rank} could not create its window: {exc!r}"
            handles = _exchange(mpi_comm, uid, problem or [b.handle for b in own], "handles", drive, recorder)
            problems = [h for h in handles if isinstance(h, str)]
            if not problems:
                try:
                    mapped[self.rank] = own[0]
                    for p in range(self.nranks):
                        if p != self.rank:
                            mapped[p] = memory.open(handles[p][0])
                    mapped[-1] = own[1] if self.rank == 0 else memory.open(handles[0][1])
                except Exception as exc:
                    problem = f"rank {self.rank} could not map a peer's window: {exc!r}"
            # Every rank has mapped every window: the names can go.
            problems += [s for s in _exchange(mpi_comm, uid, problem, "mapped", drive, recorder) if s]
            for buffer in own:
                buffer.unlink()
            if problems:
                raise RuntimeError(f"rank {self.rank}: setting up the direct windows failed: " + "; ".join(problems))
        except BaseException:
            for buffer in [*mapped.values(), *own]:
                buffer.close()  # an owner's close also removes a name not yet unlinked
            raise
        self.windows = [mapped[p] for p in range(self.nranks)]
        self.flags = mapped[-1]
        self.posted, self.done = self.flags.array[0], self.flags.array[1]

    def next_round(self) -> int:
        """The number of the next round: every rank counts the same rounds in the same order."""
        self.rounds += 1
        return self.rounds

    def view(self, rank: int, nbytes: int, dtype: Any) -> Any:
        return self.windows[rank].array[:nbytes].view(np.dtype(dtype))

    def step(self, prims: Any, flags: Flag, lo: int, hi: int, round_: int, block: int | None = None) -> WindowStep:
        """A step of ``prims`` (a :class:`~nbcoll.comm.primitives.Prims`) in round ``round_``: a :class:`WindowStep`."""
        return WindowStep(self, prims, flags, lo, hi, round_, block)

    def close(self) -> None:
        self.posted = self.done = None
        for buffer in [*self.windows, self.flags]:
            buffer.close()


def _exchange(mpi_comm: Any, uid: int, value: Any, what: str, drive: Callable, recorder: FlightRecorder) -> list:
    """Every rank's ``value``, in rank order, exchanged in messages that the watchdog polls."""
    op = _Exchange(mpi_comm, uid, value, what, recorder.record("window_setup", -1, 0, what))
    drive([op])
    return [op.values[p] for p in range(op.nranks)]


class _Exchange:
    """Sends one value to every peer and receives theirs, never blocking: an operation the watchdog drives.

    Point-to-point messages rather than a collective, so that a rank that waits knows which peers are late.
    """

    kind = "collective"

    def __init__(self, mpi_comm: Any, uid: int, value: Any, what: str, record: OperationRecord) -> None:
        self.mpi_comm, self.uid, self.what, self.record = mpi_comm, uid, what, record
        self.rank, self.nranks = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.others = [p for p in range(self.nranks) if p != self.rank]
        self.values: dict[int, Any] = {self.rank: value}
        self.sends = [mpi_comm.isend((uid, what, value), dest=p, tag=TAG_WINDOWS) for p in self.others]
        self.step = 0
        self.done = False

    @property
    def conn(self) -> _Exchange:
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
        return f"direct window setup ({self.what})"

    def describe(self) -> str:
        return f"{self.headline()}: heard from {len(self.values)} of {self.nranks} ranks"

    def waiting_for(self) -> str:
        late = self.waiting_peers()
        if late:
            return f"ranks {late} to reach their first one-shot collective on this communicator"
        return "this rank's messages to be delivered"


class WindowStep:
    """One step of a one-shot round, read from its :class:`~nbcoll.comm.primitives.Flag` bits:

    * ``DIRECT | SEND``: write ``local[lo:hi]`` into this rank's window and announce it (``posted``);
    * ``DIRECT | RECV | REDUCE | COPY``: ``out[lo:hi] = op(window(0), ..., window(n-1))``, in rank order;
    * ``DIRECT | RECV | COPY``: copy each peer ``p``'s window into ``out[p*block + lo : p*block + hi]``.

    A receiving step then says this rank has read every window (``done``). It has the interface of a
    :class:`~nbcoll.comm.primitives.Step` (``ready``, ``run``, ``describe``, ``waiting_for``, ``peers``, ``span``,
    ``nbytes``), so the same operation runs it, traces it and times it out.
    """

    def __init__(self, windows: DirectWindows, prims: Any, flags: Flag, lo: int, hi: int, round_: int,
                 block: int | None) -> None:  # fmt: skip
        self.w, self.prims, self.flags, self.lo, self.hi, self.round, self.block = (
            windows,
            prims,
            flags,
            lo,
            hi,
            round_,
            block,
        )
        self.others = [p for p in range(windows.nranks) if p != windows.rank]
        self.nbytes = (hi - lo) * prims.itemsize
        self.span = (lo, hi)
        sending = bool(flags & Flag.SEND)
        self.send = [_Peer(p) for p in self.others] if sending else []
        self.recv = [] if sending else [_Peer(p) for p in self.others]

    @property
    def name(self) -> str:
        return name_of(self.flags)

    @property
    def peers(self) -> list[int]:
        return self.others

    def _late(self) -> list[int]:
        if self.flags & Flag.SEND:  # nobody may still read what this rank is about to overwrite
            return [p for p in self.others if self.w.done[p] < self.round - 1]
        return [p for p in self.others if self.w.posted[p] < self.round]

    def ready(self) -> bool:
        return not self._late()

    def waiting_peers(self) -> list[int]:
        return self._late()

    def waiting_for(self) -> str:
        late = self._late()
        if not late:
            return "nothing (ready)"
        what = "finish reading this rank's window" if self.flags & Flag.SEND else "post their data"
        return f"ranks {late} to {what} for round {self.round}"

    def describe(self) -> str:
        return f"{self.name} of {self.nbytes} bytes, round {self.round}"

    def run(self) -> None:
        me, p, lo, hi = self.w.rank, self.prims, self.lo, self.hi
        if self.flags & Flag.SEND:
            if self.nbytes:
                copy_device(self.w.view(me, self.nbytes, p.dtype), p.local[lo:hi])
            synchronize()  # the window's bytes land before the flag that announces them
            self.w.posted[me] = self.round
            self._charge(sent=True)
            return
        if self.nbytes:
            if self.flags & Flag.REDUCE:  # fold every window, in rank order, into out
                dst = p.out[lo:hi]
                windows = [self.w.view(rank, self.nbytes, p.dtype) for rank in range(self.w.nranks)]
                combine_kernels.fold_into(p.rule, dst, windows[0], windows[1])  # unchecked: checked at the call
                for window in windows[2:]:
                    combine_kernels.fold_into(p.rule, dst, dst, window)
                if self.flags & Flag.POST:
                    p.post(dst)
            else:  # copy each peer's window into that peer's block of out
                for peer in self.others:
                    start = peer * self.block + lo
                    copy_device(p.out[start : start + hi - lo], self.w.view(peer, self.nbytes, p.dtype))
        synchronize()  # reads finish before the flag lets the owners overwrite their windows
        self.w.done[me] = self.round
        self._charge(sent=False)

    def _charge(self, sent: bool) -> None:
        for peer in self.others:
            self.prims.charge(peer, self.nbytes, sent)
