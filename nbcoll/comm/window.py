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

Example::

    windows = DirectWindows(mpi_comm, nbytes=1 << 20)
    steps = [windows.post(round_, x[0:64], (0, 64)), windows.fold(round_, op, out[0:64], (0, 64))]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcoll.comm.connection import copy_device, synchronize
from nbcoll.ipc_memory import share
from nbcoll.kernels import combine as combine_kernels


@dataclass
class _Peer:
    """Stands for a peer in traces, where a FIFO step would name its connection."""

    peer: int


class DirectWindows:
    """The windows of every rank of a communicator that lives on one machine, and their flags."""

    def __init__(self, mpi_comm: Any, nbytes: int) -> None:
        self.rank, self.nranks = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.nbytes = nbytes
        self.windows = [share(mpi_comm, nbytes, np.uint8, root=p, tag=f"win{p}") for p in range(self.nranks)]
        self.flags = share(mpi_comm, (2, self.nranks), np.int64, root=0, tag="winflags", host=True)
        if self.rank == 0:
            self.flags.array[:] = 0
        mpi_comm.Barrier()  # zeroed before anyone reads a flag
        self.posted, self.done = self.flags.array[0], self.flags.array[1]
        self.rounds = 0

    def next_round(self) -> int:
        """The number of the next round: every rank counts the same rounds in the same order."""
        self.rounds += 1
        return self.rounds

    def view(self, rank: int, nbytes: int, dtype: Any) -> Any:
        return self.windows[rank].array[:nbytes].view(np.dtype(dtype))

    def post(self, round_: int, local: Any, span: tuple[int, int], counters: Callable | None = None) -> WindowStep:
        return WindowStep("direct_post", self, round_, local=local, span=span, counters=counters)

    def fold(self, round_: int, op: Any, post: Any, dst: Any, span: tuple[int, int], counters: Callable | None = None):
        return WindowStep(
            "direct_recv_reduce_copy", self, round_, op=op, post=post, dst=dst, span=span, counters=counters
        )

    def gather(self, round_: int, out: Any, count: int, lo: int, hi: int, counters: Callable | None = None):
        return WindowStep("direct_recv", self, round_, dst=out, span=(lo, hi), block=(count, lo, hi), counters=counters)

    def close(self) -> None:
        self.posted = self.done = None
        for buffer in [*self.windows, self.flags]:
            buffer.close()


class WindowStep:
    """One step of a one-shot round: post our chunk, or read every peer's window (see the module docstring).

    It has the interface of a :class:`~nbcoll.comm.primitives.Primitive` (``ready``, ``run``, ``describe``,
    ``waiting_for``, ``peers``, ``span``, ``nbytes``), so the same operation runs it, traces it and times it out.
    """

    def __init__(self, name: str, windows: DirectWindows, round_: int, *, local: Any = None, dst: Any = None,
                 op: Any = None, post: Any = None, span: tuple[int, int] = (0, 0), block: tuple | None = None,
                 counters: Callable | None = None) -> None:  # fmt: skip
        self.name, self.w, self.round = name, windows, round_
        self.local, self.dst, self.op, self.post, self.span, self.block = local, dst, op, post, span, block
        self.counters = counters
        self.others = [p for p in range(windows.nranks) if p != windows.rank]
        ref = local if local is not None else dst
        self.dtype = np.dtype(ref.dtype)
        self.nbytes = (span[1] - span[0]) * self.dtype.itemsize
        posting = name == "direct_post"
        self.send = [_Peer(p) for p in self.others] if posting else []
        self.recv = [] if posting else [_Peer(p) for p in self.others]

    @property
    def peers(self) -> list[int]:
        return self.others

    def _late(self) -> list[int]:
        if self.name == "direct_post":
            return [p for p in self.others if self.w.done[p] < self.round - 1]
        return [p for p in self.others if self.w.posted[p] < self.round]

    def ready(self) -> bool:
        return not self._late()

    def waiting_for(self) -> str:
        late = self._late()
        if not late:
            return "nothing (ready)"
        what = "finish reading this rank's window" if self.name == "direct_post" else "post their data"
        return f"ranks {late} to {what} for round {self.round}"

    def describe(self) -> str:
        return f"{self.name} of {self.nbytes} bytes, round {self.round}"

    def run(self) -> None:
        me = self.w.rank
        if self.name == "direct_post":
            if self.nbytes:
                copy_device(self.w.view(me, self.nbytes, self.dtype), self.local)
            synchronize()  # the window's bytes land before the flag that announces them
            self.w.posted[me] = self.round
            self._charge("bytes_sent", "chunks_sent")
            return
        if self.nbytes:
            if self.block is None:  # fold every window, in rank order, into dst
                sources = [self.w.view(p, self.nbytes, self.dtype) for p in range(self.w.nranks)]
                combine_kernels.combine_into(self.op, self.dst, sources[0], sources[1])
                for src in sources[2:]:
                    combine_kernels.combine(self.op, self.dst, src)
                if self.post is not None:
                    self.post(self.dst)
            else:  # copy each peer's window into that peer's block of dst
                count, lo, hi = self.block
                for p in self.others:
                    copy_device(self.dst[p * count + lo : p * count + hi], self.w.view(p, self.nbytes, self.dtype))
        synchronize()  # reads finish before the flag lets the owners overwrite their windows
        self.w.done[me] = self.round
        self._charge("bytes_received", "chunks_received")

    def _charge(self, bytes_field: str, chunks_field: str) -> None:
        if self.counters is None:
            return
        for p in self.others:
            pc = self.counters(p)
            setattr(pc, bytes_field, getattr(pc, bytes_field) + self.nbytes)
            setattr(pc, chunks_field, getattr(pc, chunks_field) + 1)
