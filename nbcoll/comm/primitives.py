"""The primitives every collective algorithm is written in, named after NCCL's (``src/device/prims_*.h``).

A primitive moves one chunk (at most one FIFO slot) between this rank and its neighbours in the algorithm's
graph, and may fold it into local data on the way. Reading a primitive's name from left to right says what it
does with the chunk::

    send                   slot(next)   = local
    recv                   dst          = slot(prev)
    recv_reduce_send       slot(next)   = op(local, slot(prev))
    recv_copy_send         dst          = slot(prev);            slot(next) = dst
    recv_reduce_copy       dst          = op(local, slot(prev))
    recv_reduce_copy_send  dst          = op(local, slot(prev)); slot(next) = dst
    copy_send              dst          = local;                 slot(next) = local

"prev" and "next" may be several peers: a tree node receives from two children, a direct algorithm sends to
every peer. The ``direct_*`` names are the variants that read a peer's memory in place instead of through a
FIFO. In nbcoll every transport exposes its slots as device memory that the receiver maps (ipc) or that a
staging copy fills (mpi), so each ``direct_*`` primitive here is the same step as its FIFO twin: the names exist
so that an algorithm reads like NCCL's. The reads of a peer's buffer in place are the window steps of the
one-shot algorithms, in :mod:`nbcoll.comm.window`.

All the variants are one :class:`Primitive`, as in NCCL, where one ``genericOp`` template serves every name.
A primitive never blocks: :meth:`Primitive.ready` says whether every slot it reads has arrived and every slot
it writes is free, and :meth:`Primitive.run` then does the whole step at once.

Example (one step of a ring all-reduce on rank ``r``)::

    step = recv_reduce_send(prev_conn, next_conn, local=buf[lo:hi], op="sum")
    if step.ready():
        step.run()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.comm.connection import RecvConnection, SendConnection, copy_device
from nbcoll.comm.counters import PeerCounters
from nbcoll.comm.errors import CommMismatchError
from nbcoll.kernels import combine as combine_kernels

PostOp = Callable[[Any], Any]
"""What the rank holding a final value does to it before it leaves (avg's division), or ``None``."""


class Primitive:
    """One chunk through one step of an algorithm: receive from ``recv``, fold, write ``dst``, send to ``send``.

    Example::

        step = Primitive("recv_reduce_copy", recv=[conn], local=x[0:64], dst=y[0:64], op="sum")
        while not step.ready():
            pass
        step.run()

    ``local`` is this rank's contribution (or, for a pure send, the data to send); ``dst`` the output slice.
    ``local_position`` places the local contribution among the received ones when the order of the fold
    matters (direct algorithms fold in rank order so that every rank computes the same floating-point sum);
    by default it comes first. ``span`` says which elements of the collective's buffer the chunk holds, for
    traces; ``counters(peer)`` returns the per-peer counters to charge.
    """

    def __init__(
        self,
        name: str,
        *,
        recv: Sequence[RecvConnection] = (),
        send: Sequence[SendConnection] = (),
        local: Any = None,
        dst: Any = None,
        op: Any = None,
        post: PostOp | None = None,
        local_position: int = 0,
        counters: Callable[[int], PeerCounters] | None = None,
        span: tuple[int, int] | None = None,
    ) -> None:
        self.name = name
        self.recv = list(recv)
        self.send = list(send)
        self.local = local
        self.dst = dst
        self.op = op
        self.post = post
        self.local_position = local_position
        self.counters = counters
        self.span = span  # which elements of the collective's buffer this chunk is, for traces
        ref = dst if dst is not None else local
        self.dtype = np.dtype(ref.dtype)
        self.count = int(ref.size)
        self.nbytes = self.count * self.dtype.itemsize
        self._folded_into: SendConnection | None = None

    # -- what it waits for --------------------------------------------------------------------------------------

    def ready(self) -> bool:
        """True when every chunk it receives has arrived and every peer it sends to has a free slot."""
        return all(conn.ready() for conn in self.recv) and all(conn.ready() for conn in self.send)

    def waiting_for(self) -> str:
        waits = [conn.waiting_for() for conn in self.recv if not conn.ready()]
        waits += [conn.waiting_for() for conn in self.send if not conn.ready()]
        return "; ".join(waits) or "nothing (ready)"

    @property
    def peers(self) -> list[int]:
        return [conn.peer for conn in self.recv] + [conn.peer for conn in self.send]

    def waiting_peers(self) -> list[int]:
        """Every peer this step still waits for: each one whose chunk has not arrived or whose slot is full."""
        return [conn.peer for conn in [*self.recv, *self.send] if not conn.ready()]

    def describe(self) -> str:
        frm = ",".join(str(c.peer) for c in self.recv) or "-"
        to = ",".join(str(c.peer) for c in self.send) or "-"
        return f"{self.name} of {self.count} x {self.dtype} (from {frm} to {to})"

    # -- the step -----------------------------------------------------------------------------------------------

    def run(self) -> None:
        """Do the step: every connection must be :meth:`ready`."""
        received = [self._arrived(conn) for conn in self.recv]
        value = self._fold(received)
        if self.post is not None:
            self.post(value)
        if self.dst is not None and value is not self.dst and not _same_memory(self.dst, value):
            copy_device(self.dst, value)  # in place (a broadcast root, an all-gather's own block) there is no copy
        for conn in self.send:
            self._send(conn, value)
        for conn in self.recv:
            conn.release()

    def _arrived(self, conn: RecvConnection) -> Any:
        chunk = conn.peek()
        if chunk.nbytes != self.nbytes:
            raise CommMismatchError(
                f"{self.name} from peer {conn.peer}: expected a chunk of {self.nbytes} bytes "
                f"({self.count} x {self.dtype}), got {chunk.nbytes}; the ranks disagree about this collective "
                "(count, dtype or order of calls)"
            )
        if self.counters is not None:
            pc = self.counters(conn.peer)
            pc.bytes_received += self.nbytes
            pc.chunks_received += 1
        return chunk.view(self.dtype)

    def _fold(self, received: list[Any]) -> Any:
        """The value this step produces: the local data folded with what arrived, or what arrived, or local."""
        if self.op is None:
            return received[0] if received else self.local
        local = self.local
        if self.local_position and self.dst is not None and memory.overlaps(self.dst, local):
            # In place, with the local part not first: keep it before the fold overwrites it.
            local = memory.empty(local.size, local.dtype)
            copy_device(local, self.local)
        sources = list(received)
        sources.insert(self.local_position, local)
        target = self.dst
        if target is None:  # recv_reduce_send folds straight into the next peer's slot, saving a copy
            target = self._slot_of(self.send[0])
            self._folded_into = self.send[0]
        combine_kernels.combine_into(self.op, target, sources[0], sources[1])
        for src in sources[2:]:
            combine_kernels.combine(self.op, target, src)
        return target

    def _slot_of(self, conn: SendConnection) -> Any:
        return conn.slot()[: self.nbytes].view(self.dtype)

    def _send(self, conn: SendConnection, value: Any) -> None:
        if conn is not self._folded_into:
            copy_device(self._slot_of(conn), value)
        conn.post(self.nbytes, True)
        if self.counters is not None:
            pc = self.counters(conn.peer)
            pc.bytes_sent += self.nbytes
            pc.chunks_sent += 1


def _same_memory(a: Any, b: Any) -> bool:
    return a.size == b.size and memory.address_range(a) == memory.address_range(b)


# ---------------------------------------------------------------------------------------------------------------
# The named primitives. Each is one line: the name says which of recv/fold/dst/send the step does.


def send(to: Sequence[SendConnection] | SendConnection, local: Any, **kw: Any) -> Primitive:
    """``slot(next) = local`` (to every peer in ``to``)."""
    return Primitive("send", send=_listed(to), local=local, **kw)


def recv(frm: RecvConnection, dst: Any, **kw: Any) -> Primitive:
    """``dst = slot(prev)``."""
    return Primitive("recv", recv=[frm], dst=dst, **kw)


def recv_reduce_send(frm: Any, to: SendConnection, local: Any, op: Any, **kw: Any) -> Primitive:
    """``slot(next) = op(local, slot(prev)...)``: the middle of a reduction chain."""
    return Primitive("recv_reduce_send", recv=_listed(frm), send=[to], local=local, op=op, **kw)


def recv_copy_send(frm: RecvConnection, to: Any, dst: Any, **kw: Any) -> Primitive:
    """``dst = slot(prev); slot(next) = dst``: the middle of a broadcast chain."""
    return Primitive("recv_copy_send", recv=[frm], send=_listed(to), dst=dst, **kw)


def recv_reduce_copy(frm: Any, local: Any, dst: Any, op: Any, post: PostOp | None = None, **kw: Any) -> Primitive:
    """``dst = op(local, slot(prev)...)``: the end of a reduction chain."""
    return Primitive("recv_reduce_copy", recv=_listed(frm), local=local, dst=dst, op=op, post=post, **kw)


def recv_reduce_copy_send(
    frm: Any, to: Any, local: Any, dst: Any, op: Any, post: PostOp | None = None, **kw: Any
) -> Primitive:
    """``dst = op(local, slot(prev)...); slot(next) = dst``: where a reduction's final value is born."""
    return Primitive(
        "recv_reduce_copy_send", recv=_listed(frm), send=_listed(to), local=local, dst=dst, op=op, post=post, **kw
    )


def copy_send(local: Any, dst: Any, to: Any, **kw: Any) -> Primitive:
    """``dst = local; slot(next) = local``: a broadcast root."""
    return Primitive("copy_send", send=_listed(to), local=local, dst=dst, **kw)


# The direct (peer-pointer) variants: the same steps; see the module docstring.
direct_send = send
direct_recv = recv
direct_recv_reduce_copy = recv_reduce_copy
direct_recv_copy_send = recv_copy_send
direct_recv_reduce_copy_send = recv_reduce_copy_send


def _listed(conns: Any) -> list[Any]:
    return list(conns) if isinstance(conns, (list, tuple)) else [conns]
