"""Point-to-point operations: one message moved through one connection, chunk by chunk.

An operation never blocks. Its :meth:`progress` takes every step that can be taken now (a free slot to fill,
an arrived chunk to consume) and returns whether it moved; :mod:`nbcoll.comm.watchdog` calls it in turn with
the other pending operations until all are done. A message of ``n`` bytes is cut into chunks of
``chunk_bytes``::

    send:  for k in range(chunks): wait for a credit; copy data[k*chunk : (k+1)*chunk] into the slot; publish
    recv:  for k in range(chunks): wait for chunk k; check its size; copy it into data[k*chunk : ...]; credit

A 0-byte message is one empty chunk, so that every message is seen, and matched, by its receiver.

Example::

    op = SendOp(conn, flat_view, counters, record)
    while not op.done:
        op.progress()
"""

from __future__ import annotations

from typing import Any

from nbcoll.comm.connection import RecvConnection, SendConnection, copy_device
from nbcoll.comm.counters import PeerCounters
from nbcoll.comm.debug import OperationRecord
from nbcoll.comm.errors import CommMismatchError


def describe_array(data: Any) -> str:
    return f"{data.dtype}[{data.size}]"


class _Transfer:
    """The bookkeeping both directions share: a flat device array walked chunk by chunk."""

    kind = "?"

    def __init__(self, conn: Any, data: Any, counters: PeerCounters, record: OperationRecord) -> None:
        self.conn = conn
        self.data = data
        self.counters = counters
        self.record = record
        self.per_chunk = conn.chunk_bytes // data.dtype.itemsize
        self.chunks = max(1, -(-data.size // self.per_chunk))
        self.chunks_done = 0
        self.done = False

    @property
    def peer(self) -> int:
        return self.conn.peer

    @property
    def nbytes(self) -> int:
        return self.data.size * self.data.dtype.itemsize

    def _bounds(self) -> tuple[int, int, bool]:
        start = self.chunks_done * self.per_chunk
        end = min(start + self.per_chunk, self.data.size)
        return start, end, self.chunks_done + 1 == self.chunks

    def _advance(self, verb: str) -> None:
        self.chunks_done += 1
        self.record.state = "running"
        self.record.progress = f"{self.chunks_done} of {self.chunks} chunks {verb}"
        if self.chunks_done == self.chunks:
            self.done = True
            self.record.finish()

    def headline(self) -> str:
        return f"{self.kind} {'to' if self.kind == 'send' else 'from'} peer {self.peer}"

    def describe(self) -> str:
        direction = "to" if self.kind == "send" else "from"
        return (
            f"{self.kind} of {self.nbytes} bytes ({describe_array(self.data)}) {direction} peer {self.peer} "
            f"over {self.conn.transport}: {self.chunks_done} of {self.chunks} chunks done, "
            f"connection step {self.conn.step}"
        )

    def waiting_for(self) -> str:
        return self.conn.waiting_for()


class SendOp(_Transfer):
    """Sends one message: fills as many free slots as there are credits, then returns."""

    kind = "send"

    def __init__(self, conn: SendConnection, data: Any, counters: PeerCounters, record: OperationRecord) -> None:
        super().__init__(conn, data, counters, record)

    def progress(self) -> bool:
        moved = False
        while not self.done and self.conn.ready():
            start, end, last = self._bounds()
            self.conn.send_chunk(self.data[start:end], last)
            self.counters.bytes_sent += (end - start) * self.data.dtype.itemsize
            self.counters.chunks_sent += 1
            self._advance("sent")
            moved = True
        return moved


class RecvOp(_Transfer):
    """Receives one message: consumes every chunk that has arrived, returning each credit at once."""

    kind = "recv"

    def __init__(self, conn: RecvConnection, data: Any, counters: PeerCounters, record: OperationRecord) -> None:
        super().__init__(conn, data, counters, record)
        self.announced = False

    def progress(self) -> bool:
        if self.chunks_done == 0 and not self.announced:
            self.conn.expect(self.chunks)
            self.announced = True
        moved = False
        while not self.done and self.conn.ready():
            start, end, last = self._bounds()
            expected = (end - start) * self.data.dtype.itemsize
            chunk = self.conn.peek()
            if chunk.nbytes != expected or chunk.last != last:
                self.record.finish("failed")
                raise CommMismatchError(
                    f"recv from peer {self.peer}: the sent message does not fit the receive buffer of "
                    f"{self.nbytes} bytes ({describe_array(self.data)}): its chunk {self.chunks_done} holds "
                    f"{chunk.nbytes} bytes{' and ends it' if chunk.last else ''}, the buffer expects {expected} "
                    f"bytes{' and the end' if last else ' and more chunks'}. Send and receive the same number "
                    "of bytes."
                )
            with self.conn.recv_chunk() as chunk:
                copy_device(self.data[start:end], chunk.view(self.data.dtype))
            self.counters.bytes_received += expected
            self.counters.chunks_received += 1
            self._advance("received")
            moved = True
        return moved
