"""The ipc transport: the sender writes straight into a FIFO that lives in the receiver's memory.

The receiver allocates its FIFO (``steps`` slots of ``chunk_bytes``) as an IPC-exportable buffer and hands its
*handle* to the sender, which maps the same memory into its own address space:

* on ``cuda`` the handle is a CUDA IPC handle (``cudaIpcGetMemHandle``): the sender's copy kernel writes into
  the receiver's GPU memory directly, over NVLink or PCIe;
* on ``sim`` and ``numpy`` it names a POSIX shared-memory segment that both processes map, so the same protocol
  and the same code run on any CPU.

The step counters live in the machine's control page (:mod:`nbcoll.comm.control`), polled by the host.

Example (what the communicator does for each pair of ranks on one machine)::

    fifo = create_fifo(steps * chunk_bytes, tag="fifo")         # on the receiver
    peer_fifo = open_fifo(fifo.handle)                          # on the sender, after exchanging handles
    send = IpcSendConnection(peer=1, fifo=peer_fifo, counters=control.pair(0, 1), steps=8, chunk_bytes=4096)
    recv = IpcRecvConnection(peer=0, fifo=fifo, counters=control.pair(0, 1), steps=8, chunk_bytes=4096)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.comm.connection import Chunk, RecvConnection, SendConnection, synchronize
from nbcoll.comm.control import PairCounters
from nbcoll.ipc_memory import IpcBuffer, IpcHandleInfo


def create_fifo(nbytes: int, tag: str) -> IpcBuffer:
    """A new exportable ``uint8`` buffer of ``nbytes``; ``.handle`` lets a peer open it, ``.array`` is its data."""
    return IpcBuffer.create((nbytes,), np.uint8, tag=tag)


def open_fifo(handle: IpcHandleInfo) -> IpcBuffer:
    """Map a peer's FIFO from its handle."""
    return IpcBuffer.open(handle)


def _slot(fifo_array: Any, index: int, chunk_bytes: int) -> Any:
    return fifo_array[index * chunk_bytes : (index + 1) * chunk_bytes]


class IpcSendConnection(SendConnection):
    """Writes chunks into the receiver's FIFO, mapped into this process."""

    transport = "ipc"

    def __init__(self, peer: int, fifo: Any, counters: PairCounters, steps: int, chunk_bytes: int) -> None:
        super().__init__(peer, steps, chunk_bytes)
        self.fifo = fifo
        self.counters = counters

    def ready(self) -> bool:
        return self.step - int(self.counters.tail[0]) < self.steps

    def slot(self) -> Any:
        return _slot(self.fifo.array, self.step % self.steps, self.chunk_bytes)

    def post(self, nbytes: int, last: bool) -> None:
        index = self.step % self.steps
        synchronize()  # the slot's bytes must land before the step that announces them
        self.counters.nbytes[index] = nbytes
        self.counters.last[index] = int(last)
        self.step += 1
        self.counters.head[0] = self.step

    def waiting_for(self) -> str:
        tail = int(self.counters.tail[0])
        return (
            f"a free FIFO slot (credit): {self.step} chunks published, the receiver has consumed {tail}, "
            f"and all {self.steps} slots are full"
        )

    def close(self) -> None:
        self.fifo.close()


class IpcRecvConnection(RecvConnection):
    """Reads chunks from its own FIFO, which the sender fills."""

    transport = "ipc"

    def __init__(self, peer: int, fifo: Any, counters: PairCounters, steps: int, chunk_bytes: int) -> None:
        super().__init__(peer, steps, chunk_bytes)
        self.fifo = fifo
        self.counters = counters

    def ready(self) -> bool:
        return int(self.counters.head[0]) > self.step

    def expect(self, chunks: int) -> None:
        pass  # the FIFO is always there: nothing to prepare

    def peek(self) -> Chunk:
        index = self.step % self.steps
        nbytes = int(self.counters.nbytes[index])
        data = _slot(self.fifo.array, index, self.chunk_bytes)[:nbytes]
        return Chunk(data, nbytes, bool(self.counters.last[index]), self.step)

    def release(self) -> None:
        synchronize()  # reads of the slot must finish before the sender may overwrite it
        self.step += 1
        self.counters.tail[0] = self.step

    def waiting_for(self) -> str:
        head = int(self.counters.head[0])
        return f"data from the sender: {self.step} chunks consumed, the sender has published {head}"

    def close(self) -> None:
        self.fifo.close()
