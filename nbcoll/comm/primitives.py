"""The primitives every collective algorithm is written in, shaped like NCCL's (``src/device/prims_*.h``).

A :class:`Prims` is bound once, when an algorithm starts, to the collective's two buffers (``local``, this rank's
input, and ``out``, its output), to the peers it receives from ("prev") and sends to ("next"), and to the
reduction op. Each call then names only an element range, and returns one :class:`Step`: one chunk (at most one
FIFO slot) through one hop. Reading a primitive's name from left to right says what the step does::

    send(lo, hi)                   slot(next) = local[lo:hi]
    recv(lo, hi)                   out[lo:hi] = slot(prev)
    recv_reduce_send(lo, hi)       slot(next) = op(local[lo:hi], slot(prev)...)
    recv_copy_send(lo, hi)         out[lo:hi] = slot(prev);                        slot(next) = out[lo:hi]
    recv_reduce_copy(lo, hi)       out[lo:hi] = op(local[lo:hi], slot(prev)...)
    recv_reduce_copy_send(lo, hi)  out[lo:hi] = op(local[lo:hi], slot(prev)...);   slot(next) = out[lo:hi]
    copy_send(lo, hi)              out[lo:hi] = local[lo:hi];                      slot(next) = local[lo:hi]
    copy(lo, hi)                   out[lo:hi] = local[lo:hi]

``out_at=`` places the output range elsewhere than the input range (a reduce-scatter reads block ``r`` of a large
input into a small output). "prev" and "next" may be several peers: a tree node receives from two children, a
direct algorithm sends to every peer.

Every name is one generic step with explicit :class:`Flag` bits, as every NCCL primitive is one ``genericOp``:
``recv_reduce_copy_send`` is ``RECV | REDUCE | COPY | SEND``. The one-shot algorithms speak the same names through
a *protocol* (:mod:`nbcoll.comm.protocol_simple`), which the plan chooses: these FIFO steps, the direct windows'
steps (``DIRECT``: the peers' buffers read in place, :mod:`nbcoll.comm.protocol_direct`) or LL's
(:mod:`nbcoll.comm.protocol_ll`), as NCCL's ``prims_simple.h`` and ``prims_ll.h`` share their method names.

The buffers, the op and the peers are checked once, when the collective is called; a step only checks what the
peers sent (a chunk of the wrong size means the ranks disagree about the call). A step never blocks:
:meth:`Step.ready` says whether every slot it reads has arrived and every slot it writes is free, and
:meth:`Step.run` then does the whole step at once.

Example (one step of a ring all-reduce on rank ``r``)::

    prims = ctx.prims(x, x, recv_from=[r - 1], send_to=[r + 1], op="sum")
    step = prims.recv_reduce_send(0, 64)
    if step.ready():
        step.run()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.comm.connection import RecvConnection, SendConnection, apart_from
from nbcoll.comm.counters import PeerCounters
from nbcoll.comm.errors import CommMismatchError
from nbcoll.comm.step_flags import (  # noqa: F401  (every flag and name_of: importable from here, as before)
    COPY,
    COPY_BIT,
    DIRECT,
    POST,
    POST_BIT,
    RECV,
    RECV_BIT,
    REDUCE,
    REDUCE_BIT,
    SEND,
    SEND_BIT,
    Flag,
    name_of,
)
from nbcoll.kernels import combine as combine_kernels
from nbcoll.kernels.copy import copy_chunk
from nbcoll.kernels.dispatch import resolve

PostOp = Callable[[Any], Any]
"""What the rank holding a final value does to it before it leaves (avg's division), or ``None``."""


class Prims:
    """NCCL's ``Primitives`` object: one algorithm part's buffers, peers and op, bound once; calls take ranges.

    Example::

        prims = Prims(local=x, out=y, recv=[conn_from_prev], send=[conn_to_next], op="sum")
        step = prims.recv_reduce_copy_send(0, 64)        # y[0:64] = x[0:64] + slot(prev); slot(next) = y[0:64]

    ``local_position`` places the local input among the received chunks when the order of the fold matters
    (direct algorithms fold in rank order, so that every rank computes the same floating-point sum); by default
    it comes first. ``post`` is applied to the values a reduction finishes here. ``counters(peer)`` returns the
    per-peer counters to charge (``rank``'s own entry counts the copies within this rank). ``windows`` are the
    peers' windows and registered buffers, for the direct protocol's steps; ``by_address``: an unregistered input may
    be lent by its address, which only collectives that copy it do (a fold's input never is). ``copies``: a
    :class:`~nbcoll.comm.copy_policy.CopyPolicy` that may choose streaming stores (a CPU fast path), or ``None``.
    """

    def __init__(
        self,
        local: Any,
        out: Any,
        *,
        recv: Sequence[RecvConnection] = (),
        send: Sequence[SendConnection] = (),
        op: Any = None,
        post: PostOp | None = None,
        local_position: int = 0,
        counters: Callable[[int], PeerCounters] | None = None,
        windows: Any = None,
        rank: int = -1,
        by_address: bool = True,
        call: str = "",
        copies: Any = None,
    ) -> None:
        self.local, self.out = local, out
        self.recv_conns, self.send_conns = list(recv), list(send)
        self.rule = None if op is None else combine_kernels.kernel_op(op)  # parsed here, not once per chunk
        self.post = post
        self.local_position = local_position
        self.counters = counters
        self.windows = windows
        self.rank = rank
        self.call = call  # "all_gather (direct)": named by the errors a step raises itself
        # A registered input is lent to the peers, unless this rank folds over it while they read it; a large
        # unregistered one too, by its address, when the peers only copy it (DirectWindows.lend).
        lendable = windows is not None and not (op is not None and out is not None and memory.overlaps(local, out))
        self.lent = windows.lend(local, by_address=by_address and op is None) if lendable else None
        self.lent_round: int | None = None  # the last round whose posted data are this rank's own buffer
        ref = local if local is not None else out
        self.dtype = np.dtype(ref.dtype)
        self.itemsize = self.dtype.itemsize
        # Traces place a chunk in the collective's larger buffer (the input of a reduce-scatter, the output of an
        # all-gather), so that every rank's spans of one collective index the same array.
        self.spans_in_out = out is not None and (local is None or out.size > local.size)
        # dst[:] = src into a chunk of an output (copy_out), and into memory a peer reads next: a FIFO slot, a
        # window (copy_shared). The ordinary copy kernel, unless a copy policy (a CPU fast path) chooses streaming
        # stores for them (nbcoll.comm.copy_policy); chosen here, once, not per step.
        ordinary = resolve(copy_chunk)
        self.copy_out: Callable[[Any, Any], Any] = ordinary if copies is None else copies.copy_out(out)
        self.copy_shared: Callable[[Any, Any], Any] = ordinary if copies is None else copies.copy_shared(local, out)

    # -- the named primitives: each is one Step with its flags ------------------------------------------------

    def send(self, lo: int, hi: int) -> Step:
        return Step(self, SEND, lo, hi)

    def recv(self, lo: int, hi: int, out_at: int | None = None) -> Step:
        return Step(self, RECV | COPY, lo, hi, out_at)

    def recv_reduce_send(self, lo: int, hi: int) -> Step:
        return Step(self, RECV | REDUCE | SEND, lo, hi)

    def recv_copy_send(self, lo: int, hi: int) -> Step:
        return Step(self, RECV | COPY | SEND, lo, hi)

    def recv_reduce_copy(self, lo: int, hi: int, out_at: int | None = None) -> Step:
        return Step(self, RECV | REDUCE | COPY | self._post, lo, hi, out_at)

    def recv_reduce_copy_send(self, lo: int, hi: int) -> Step:
        return Step(self, RECV | REDUCE | COPY | SEND | self._post, lo, hi)

    def copy_send(self, lo: int, hi: int, out_at: int | None = None) -> Step:
        return Step(self, COPY | SEND, lo, hi, out_at)

    def copy(self, lo: int, hi: int, out_at: int | None = None) -> Step:
        """A local copy, as a step, so that it runs in order with the others (and shows in traces)."""
        return Step(self, COPY, lo, hi, out_at)

    def post_op(self, lo: int, hi: int) -> Step:
        """The op's last step (avg's division) on ``out[lo:hi]``, a value already final on this rank."""
        return Step(self, COPY | self._post, lo, hi)

    @property
    def _post(self) -> Flag:
        return POST if self.post is not None else Flag(0)

    # -- what the steps share -----------------------------------------------------------------------------------

    def counters_of(self, peers: Sequence[int]) -> list[PeerCounters]:
        """The live counters of ``peers`` (none when this collective is not counted), for a step that charges the
        same peers on every run (:func:`~nbcoll.comm.counters.charge_sent`, ``charge_read``, ``charge_copied``)."""
        return [] if self.counters is None else [self.counters(peer) for peer in peers if peer >= 0]

    def charge_copy(self, peer: int, nbytes: int) -> None:
        """``nbytes`` copied or folded out of memory ``peer`` wrote, or into memory it reads (``peer`` is this
        rank for a copy within it)."""
        if self.counters is not None and peer >= 0:
            self.counters(peer).bytes_copied += nbytes

    def charge_read(self, peer: int, nbytes: int) -> None:
        """``nbytes`` received from ``peer`` by copying or folding them out of memory it wrote (a direct read):
        :meth:`charge_copy` and :meth:`charge` at once, since a small collective pays for every call here."""
        if self.counters is None:
            return
        pc = self.counters(peer)
        pc.bytes_copied += nbytes
        pc.bytes_received += nbytes
        pc.chunks_received += 1

    def charge(self, peer: int, nbytes: int, sent: bool) -> None:
        if self.counters is None:
            return
        pc = self.counters(peer)
        if sent:
            pc.bytes_sent += nbytes
            pc.chunks_sent += 1
        else:
            pc.bytes_received += nbytes
            pc.chunks_received += 1


class Step:
    """One chunk through one hop: the generic step every primitive is (NCCL's ``genericOp``).

    Example::

        step = Step(prims, RECV | REDUCE | COPY, 0, 64)     # prims.recv_reduce_copy(0, 64)
        while not step.ready():
            pass
        step.run()

    ``name``, ``recv``, ``send``, ``span`` and ``nbytes`` describe it in traces and error messages.
    """

    __slots__ = ("prims", "flags", "lo", "hi", "out_at", "recv", "send")

    def __init__(self, prims: Prims, flags: Flag, lo: int, hi: int, out_at: int | None = None) -> None:
        self.prims, self.flags, self.lo, self.hi = prims, flags, lo, hi
        self.out_at = lo if out_at is None else out_at
        bits = int(flags)
        self.recv = prims.recv_conns if bits & RECV_BIT else ()
        self.send = prims.send_conns if bits & SEND_BIT else ()

    @property
    def name(self) -> str:
        return name_of(self.flags)

    @property
    def count(self) -> int:
        return self.hi - self.lo

    @property
    def nbytes(self) -> int:
        return (self.hi - self.lo) * self.prims.itemsize

    @property
    def span(self) -> tuple[int, int]:
        """Which elements of the collective's (larger) buffer this chunk is, for traces."""
        if self.prims.spans_in_out:
            return self.out_at, self.out_at + self.hi - self.lo
        return self.lo, self.hi

    # -- what it waits for --------------------------------------------------------------------------------------

    def ready(self) -> bool:
        """True when every chunk it receives has arrived and every peer it sends to has a free slot."""
        return all(conn.ready() for conn in self.recv) and all(conn.ready() for conn in self.send)

    def waiting_for(self) -> str:
        waits = [conn.waiting_for() for conn in [*self.recv, *self.send] if not conn.ready()]
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
        return f"{self.name} of {self.count} x {self.prims.dtype} (from {frm} to {to})"

    # -- the step -----------------------------------------------------------------------------------------------

    def run(self) -> None:
        """Do the step (every connection must be :meth:`ready`): receive, fold, post-op, copy out, send."""
        p, flags, lo, hi = self.prims, int(self.flags), self.lo, self.hi
        nbytes = (hi - lo) * p.itemsize
        dst = p.out[self.out_at : self.out_at + hi - lo] if flags & COPY_BIT else None
        received = [self._arrived(conn, nbytes) for conn in self.recv]
        folded_into = None
        if flags & REDUCE_BIT:
            local = p.local[lo:hi]
            if p.local_position and dst is not None:  # in place, the local part not first: fold a copy of it
                local = apart_from(dst, local)
            received.insert(p.local_position, local)
            if dst is None:  # recv_reduce_send folds straight into the next peer's slot, saving a copy
                folded_into = self.send[0]
                dst = folded_into.slot()[:nbytes].view(p.dtype)
            # The combine kernel, launched unchecked: the buffers and the op were checked when the call began.
            combine_kernels.fold_into(p.rule, dst, received)
            value = dst
        elif flags & RECV_BIT:
            value = received[0]
        else:
            value = p.local[lo:hi]
        if flags & POST_BIT:
            p.post(value)
        if dst is not None and value is not dst and not memory.same_memory(dst, value):
            p.copy_out(dst, value)  # in place (a broadcast root, an all-gather's own block) there is no copy
            p.charge_copy(self.recv[0].peer if flags & RECV_BIT and not flags & REDUCE_BIT else p.rank, nbytes)
        for conn in self.recv if flags & REDUCE_BIT else ():
            p.charge_copy(conn.peer, nbytes)  # the fold read the peer's slot
        for conn in self.send:
            if conn is not folded_into and nbytes:
                p.copy_shared(conn.slot()[:nbytes].view(p.dtype), value)
            p.charge_copy(conn.peer, nbytes)  # written into the peer's slot (by the copy, or by the fold)
            conn.post(nbytes, True)
            p.charge(conn.peer, nbytes, sent=True)
        for conn in self.recv:
            conn.release()

    def _arrived(self, conn: RecvConnection, nbytes: int) -> Any:
        chunk = conn.peek()
        if chunk.nbytes != nbytes:
            raise CommMismatchError(
                f"{self.name} from peer {conn.peer}: expected a chunk of {nbytes} bytes "
                f"({self.count} x {self.prims.dtype}), got {chunk.nbytes}; the ranks disagree about this "
                "collective (count, dtype or order of calls)"
            )
        self.prims.charge(conn.peer, nbytes, sent=False)
        return chunk.view(self.prims.dtype)
