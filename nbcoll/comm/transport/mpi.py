"""The mpi transport: chunks travel as MPI messages, staged through host memory, between nodes.

Each slot of the FIFO exists twice: a device slot that the caller fills or reads with kernels (the same
interface as the ipc transport), and a host slot that MPI reads or writes (on ``numpy`` the two are one array,
so no staging copy is made). Credits are MPI's own, and both directions keep ``steps`` chunks in flight::

    receiver: keep an Irecv posted in every free slot        sender: Issend each chunk as soon as its slot is free
              (steps receives at once, in step order)                (at most steps Issends pending)

* a posted receive is a credit: the receiver posts one in every slot it does not hold, so up to ``steps``
  chunks can be on the wire at once, as NCCL's network proxy keeps its receives posted;
* the sender sends each chunk with ``Issend``, which completes only once the matching receive is posted, so
  a sender can never run more than ``steps`` chunks ahead of its receiver;
* neither side blocks: ``ready()`` tests a request, and the progress loop decides how long to wait, bounded by
  ``NBCOLL_TIMEOUT``; the device-to-host copy of chunk k+1 runs while chunk k is on the wire.

MPI matches the messages of one sender in the order they were sent, and the receives are posted in step order,
so the receive posted for step ``s`` gets chunk ``s``. A chunk's MPI tag says whether it ends its message. The
receives still posted when the connection closes are cancelled. Device pointers go to MPI only with
``NBCOLL_MPI_CUDA_AWARE=1`` on ``cuda``: an MPI library that is not CUDA-aware crashes on them.

``most_posted`` (receiver) and ``most_in_flight`` (sender) record the most requests ever pending at once: the
depth of the pipeline a run reached.

Example::

    send = MpiSendConnection(peer=2, mpi_comm=data_comm, steps=8, chunk_bytes=4096, cuda_aware=False)
    recv = MpiRecvConnection(peer=2, mpi_comm=data_comm, steps=8, chunk_bytes=4096, cuda_aware=False)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from nbcoll import backend, memory
from nbcoll.comm.connection import Chunk, RecvConnection, SendConnection, synchronize

TAG_MORE = 1
"""Tag of a chunk followed by more chunks of the same message."""
TAG_LAST = 2
"""Tag of the last chunk of a message."""


def _device_to_host(device: Any, host: np.ndarray) -> None:
    if backend.get_backend() == "numpy":
        np.copyto(host, device)
    else:
        device.copy_to_host(host)


def _host_to_device(host: np.ndarray, device: Any) -> None:
    if backend.get_backend() == "numpy":
        np.copyto(device, host)
    else:
        device.copy_to_device(host)


class _StagedSlots:
    """``steps`` device slots and, unless MPI can read them where they are, their host staging twins.

    MPI reads a device slot in place on ``numpy`` (it is host memory) and on ``cuda`` with a CUDA-aware MPI.
    """

    def __init__(self, steps: int, chunk_bytes: int, cuda_aware: bool) -> None:
        name = backend.get_backend()
        self.direct = name == "numpy" or (cuda_aware and name == "cuda")
        self.device = [memory.empty(chunk_bytes, np.uint8) for _ in range(steps)]
        if self.direct:
            self.host = self.device
        elif name == "cuda":
            self.host = [backend.cuda().pinned_array(chunk_bytes, np.uint8) for _ in range(steps)]
        else:
            self.host = [np.empty(chunk_bytes, np.uint8) for _ in range(steps)]

    def to_host(self, index: int, nbytes: int) -> None:
        if self.direct:
            synchronize()  # MPI reads the device slot itself: the kernel that filled it must be done
        elif nbytes:
            _device_to_host(self.device[index][:nbytes], self.host[index][:nbytes])

    def to_device(self, index: int, nbytes: int) -> None:
        if not self.direct and nbytes:
            _host_to_device(self.host[index][:nbytes], self.device[index][:nbytes])


_UNFINISHED: list[tuple[MPI.Request, Any]] = []
"""Requests still pending when their connection closed (after a failure), kept with their buffers.

Cancelling a send is not reliable in every MPI (it can crash), and the buffers must outlive the requests, so
they are left to finish, or not, while the process lives."""


def _abandon(requests: list[MPI.Request | None], buffers: Any) -> None:
    for request in requests:
        if request is not None and not request.Test():
            _UNFINISHED.append((request, buffers))


def _cancel_receives(requests: list[MPI.Request | None], buffers: Any) -> None:
    """Cancel the receives no chunk has matched; one that matched meanwhile, or resists, is left as abandoned."""
    for request in requests:
        if request is None or request.Test():
            continue
        request.Cancel()
        if not request.Test():  # a receive's cancel completes locally; this keeps even a stubborn MPI unblocked
            _UNFINISHED.append((request, buffers))


class MpiSendConnection(SendConnection):
    """Stages each chunk to the host and sends it with ``Issend``; up to ``steps`` sends are pending at once."""

    transport = "mpi"

    def __init__(self, peer: int, mpi_comm: MPI.Comm, steps: int, chunk_bytes: int, cuda_aware: bool) -> None:
        super().__init__(peer, steps, chunk_bytes)
        self.mpi_comm = mpi_comm
        self.slots = _StagedSlots(steps, chunk_bytes, cuda_aware)
        self.requests: list[MPI.Request | None] = [None] * steps
        self.in_flight = 0  # Issends not yet known to be matched
        self.most_in_flight = 0

    def ready(self) -> bool:
        index = self.step % self.steps
        request = self.requests[index]
        if request is not None:
            if not request.Test():
                return False
            self.requests[index] = None
            self.in_flight -= 1
        return True

    def slot(self) -> Any:
        return self.slots.device[self.step % self.steps]

    def post(self, nbytes: int, last: bool) -> None:
        index = self.step % self.steps
        self.slots.to_host(index, nbytes)
        tag = TAG_LAST if last else TAG_MORE
        buffer = [self.slots.host[index][:nbytes], MPI.BYTE]
        self.requests[index] = self.mpi_comm.Issend(buffer, dest=self.peer, tag=tag)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.step += 1

    def waiting_for(self) -> str:
        return (
            f"the receiver to post a receive for slot {self.step % self.steps} (credit): {self.step} chunks "
            f"sent, the oldest of the last {self.steps} is not yet matched"
        )

    def close(self) -> None:
        _abandon(self.requests, self.slots)


class MpiRecvConnection(RecvConnection):
    """Keeps a receive posted in every free slot; hands each arrived chunk over in its device slot."""

    transport = "mpi"

    def __init__(self, peer: int, mpi_comm: MPI.Comm, steps: int, chunk_bytes: int, cuda_aware: bool) -> None:
        super().__init__(peer, steps, chunk_bytes)
        self.mpi_comm = mpi_comm
        self.slots = _StagedSlots(steps, chunk_bytes, cuda_aware)
        self.requests: list[MPI.Request | None] = [None] * steps
        self.posted = 0  # receives posted so far; those for steps [step, posted) are pending
        self.most_posted = 0
        self.arrived: Chunk | None = None

    def expect(self, chunks: int) -> None:
        self._post_receives()  # every free slot already gets a receive; this only posts them early

    def _post_receives(self) -> None:
        # A receive in every slot the caller does not hold: the slot of the chunk being consumed is reposted
        # only by release(), once the caller is done with it.
        if self.posted - self.step == self.steps:
            return
        if self.slots.direct:
            synchronize()  # MPI writes the device slot itself: kernels still reading its last chunk must be done
        while self.posted - self.step < self.steps:
            index = self.posted % self.steps
            self.requests[index] = self.mpi_comm.Irecv(
                [self.slots.host[index], MPI.BYTE], source=self.peer, tag=MPI.ANY_TAG
            )
            self.posted += 1
        self.most_posted = max(self.most_posted, self.posted - self.step)

    def ready(self) -> bool:
        if self.arrived is not None:
            return True
        self._post_receives()
        index = self.step % self.steps
        status = MPI.Status()
        if not self.requests[index].Test(status):
            return False
        self.requests[index] = None
        nbytes = status.Get_count(MPI.BYTE)
        self.slots.to_device(index, nbytes)
        data = self.slots.device[index][:nbytes]
        self.arrived = Chunk(data, nbytes, status.Get_tag() == TAG_LAST, self.step)
        return True

    def peek(self) -> Chunk:
        if not self.ready():
            raise RuntimeError("peek(): no chunk has arrived; call it only when ready() is True")
        return self.arrived

    def release(self) -> None:
        self.arrived = None
        self.step += 1
        self._post_receives()

    def waiting_for(self) -> str:
        return (
            f"chunk {self.step} from the sender over MPI: {self.step} chunks consumed so far, "
            f"{self.posted - self.step} receives posted"
        )

    def close(self) -> None:
        _cancel_receives(self.requests, self.slots)
