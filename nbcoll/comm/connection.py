"""The FIFO and credit protocol of one directed connection, the same for every transport.

A connection from a sender to a receiver is a FIFO of ``steps`` slots of ``chunk_bytes`` each, in memory the
receiver reads. Two counters drive it, as in NCCL:

* the sender's ``step``: chunks published so far (the *head*);
* the receiver's ``step``: chunks consumed so far (the *tail*).

::

    sender, for each chunk:                    receiver, for each chunk:
        wait until head - tail < steps             wait until head > tail      (data has arrived)
        write the chunk into slot head % steps     read slot tail % steps
        head += 1                  (publish)       tail += 1                   (return the credit)

A free slot is a *credit*: the sender can run at most ``steps`` chunks ahead of the receiver, and a message
larger than the FIFO flows through it chunk by chunk. Every chunk carries its size in bytes and whether it is
the last of its message, so that a receiver can tell when a sender's message does not fit its buffer.

The classes below are the interface the point-to-point operations and the collective primitives build on;
:mod:`nbcoll.comm.transport.ipc` and :mod:`nbcoll.comm.transport.mpi` implement them. Nothing here blocks:
``ready()`` says whether a step can be taken now, and the caller decides how to wait (see
:mod:`nbcoll.comm.watchdog`).

Example (what a primitive does with a connection)::

    if send_conn.ready():
        send_conn.send_chunk(data[0:256], last=False)      # copy into the peer's slot and publish
    if recv_conn.ready():
        with recv_conn.recv_chunk() as chunk:              # the slot, until the block ends
            combine("sum", acc[0:256], chunk.view(acc.dtype))
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcoll import backend, memory
from nbcoll.kernels import copy as copy_kernels


def copy_device(dst: Any, src: Any) -> None:
    """``for i: dst[i] = src[i]`` between contiguous device arrays of one dtype and size, on any backend.

    Always the copy kernel (the NumPy reference on ``numpy``), so every backend runs the same path; unchecked,
    since every chunk is a slice of buffers the collective checked when it was called.
    """
    if src.size:
        copy_kernels.copy_chunk(dst, src)


def apart_from(dst: Any, src: Any) -> Any:
    """``src``, or a copy of it when ``dst`` overlaps it.

    A fold in place whose own operand is not the first (a rank from 2 on folds in rank order) would overwrite that
    operand with the first folds before reading it: it folds a copy instead.
    """
    if not memory.overlaps(dst, src):
        return src
    kept = memory.empty(src.size, src.dtype)
    copy_device(kept, src)
    return kept


def synchronize() -> None:
    """Make device writes visible before a step counter announces them (a no-op off the GPU)."""
    if backend.get_backend() == "cuda":
        backend.cuda().synchronize()


@dataclass
class Chunk:
    """One received chunk: ``data`` is the slot's bytes as a ``uint8`` device array, valid until released."""

    data: Any
    nbytes: int
    last: bool
    step: int

    def view(self, dtype: Any) -> Any:
        """The chunk's bytes as a device array of ``dtype`` (no copy)."""
        return self.data.view(np.dtype(dtype))


class SendConnection(ABC):
    """The sending end of a connection: wait for a credit, fill the slot, publish."""

    transport = "?"

    def __init__(self, peer: int, steps: int, chunk_bytes: int) -> None:
        self.peer = peer
        self.steps = steps
        self.chunk_bytes = chunk_bytes
        self.step = 0

    @abstractmethod
    def ready(self) -> bool:
        """True when slot ``step % steps`` is free: the receiver has returned its credit."""

    @abstractmethod
    def slot(self) -> Any:
        """The next slot, a ``uint8`` device array of ``chunk_bytes`` the caller may write (when ``ready()``)."""

    @abstractmethod
    def post(self, nbytes: int, last: bool) -> None:
        """Publish the slot just written, holding ``nbytes`` bytes: ``step += 1``."""

    @abstractmethod
    def waiting_for(self) -> str:
        """What a sender that is not ``ready()`` waits for, in words, for error messages."""

    def send_chunk(self, src: Any, last: bool) -> None:
        """Copy the contiguous device array ``src`` (at most ``chunk_bytes``) into the next slot and publish it."""
        nbytes = src.size * src.dtype.itemsize
        if nbytes:
            copy_device(self.slot()[:nbytes].view(src.dtype), src)
        self.post(nbytes, last)

    @abstractmethod
    def close(self) -> None:
        """Release what the connection holds; the communicator calls this once."""


class RecvConnection(ABC):
    """The receiving end of a connection: wait for data, consume the slot, return the credit."""

    transport = "?"

    def __init__(self, peer: int, steps: int, chunk_bytes: int) -> None:
        self.peer = peer
        self.steps = steps
        self.chunk_bytes = chunk_bytes
        self.step = 0

    @abstractmethod
    def ready(self) -> bool:
        """True when the chunk of step ``step`` has arrived."""

    @abstractmethod
    def expect(self, chunks: int) -> None:
        """Announce that the caller is about to consume ``chunks`` more chunks.

        A transport may prepare for them (mpi posts its receives ahead); ``ready()`` works without it, one chunk
        at a time.
        """

    @abstractmethod
    def peek(self) -> Chunk:
        """The arrived chunk (when ``ready()``); its slot stays the receiver's until :meth:`release`."""

    @abstractmethod
    def release(self) -> None:
        """Return the slot of the chunk just consumed to the sender: ``step += 1``."""

    @abstractmethod
    def waiting_for(self) -> str:
        """What a receiver that is not ``ready()`` waits for, in words, for error messages."""

    @contextlib.contextmanager
    def recv_chunk(self) -> Iterator[Chunk]:
        """The arrived chunk, for the duration of the block; its credit goes back to the sender at the end."""
        chunk = self.peek()
        yield chunk
        self.release()

    @abstractmethod
    def close(self) -> None:
        """Release what the connection holds; the communicator calls this once."""
