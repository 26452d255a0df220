"""The primitives of a one-shot collective, whatever its protocol, and the simple protocol: FIFO slots.

A one-shot algorithm (:mod:`nbcoll.comm.algorithms.direct`) is written once, in one vocabulary, and the plan
chooses which protocol carries it (:func:`nbcoll.comm.planning.protocol_for`), as NCCL's ``Primitives`` is one
template with a simple and an LL specialization (``prims_simple.h``, ``prims_ll.h``) that share their method names:

=========================================================  ======================================================
:class:`SimpleProtocol` (this module)                      FIFO slots (:mod:`nbcoll.comm.connection`): a chunk
                                                           per peer per step
:class:`~nbcoll.comm.protocol_direct.DirectProtocol`       the peers' windows and registered buffers, read in
                                                           place (:mod:`nbcoll.comm.window`)
:class:`~nbcoll.comm.protocol_ll.LLProtocol`               8-byte lines that carry their round number, so
                                                           nothing waits for a flag (:mod:`nbcoll.comm.ll`)
=========================================================  ======================================================

A protocol object is bound once to one collective (``ctx.one_shot``): its buffers, ``count`` elements per block,
where each peer's block lies in the input (``in_block``: peer ``q`` reads ``local[q*in_block : ...]``; ``None``
when every peer reads the same) and in the output (``out_block``: source ``p``'s lands at ``out[p*out_block :
...]``), the op, and the root of a rooted call. Each call then names an element range ``[lo, hi)`` of a block::

    prims.pieces                 the spans of [0, count) the protocol moves in turn (its rounds, numbered now)
    send(lo, hi)                 copy in: post local[q*in_block + lo : ... + hi] where peer q reads it
    copy_send(lo, hi)            send; and out[me*out_block + lo : ...] = local[me*in_block + lo : ...], our own
    recv(lo, hi)                 load: out[p*out_block + lo : ...] = what p posted, for every source p
    recv_reduce_copy(lo, hi)     load, reduce, store: out[lo:hi] = op(what rank 0 posted, ..., rank n-1)
    release()                    the closing barrier: wait until no peer still reads what this rank lent

Each call returns the steps that do it in its protocol (:class:`~nbcoll.comm.primitives.Step` or steps with its
interface), which the algorithm yields with ``yield from``: usually one, but a post over the windows is a step of
its own, LL writes a round's lines in the step that reads it, and a FIFO receive from every peer is one step per
peer. Every rank folds in rank order, so every rank computes the same bits, whatever the protocol.

Example (the one-shot all-reduce, in any protocol)::

    prims = ctx.one_shot(x, y, x.size, op="sum")
    for lo, hi in prims.pieces:
        yield from prims.send(lo, hi)                # copy in
        yield from prims.recv_reduce_copy(lo, hi)    # barrier; load every rank's piece, reduce, store
    yield from prims.release()                       # barrier
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.comm.primitives import Step


def spans(count: int, elems: int) -> list[tuple[int, int]]:
    """``[0, count)`` in pieces of at most ``elems`` elements.

    >>> spans(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    """
    return [(lo, min(lo + elems, count)) for lo in range(0, count, max(1, elems))]


class OneShot:
    """What every protocol's one-shot primitives share: the call's shape, bound once (see the module's docstring);
    ``ctx`` is the algorithm's :class:`~nbcoll.comm.algorithms.common.Context`.

    Example::

        prims = ctx.one_shot(x, out, x.size, out_block=x.size)    # an all-gather's, in the plan's protocol
        prims.sources                                             # whom it reads: every peer
    """

    pieces: list[tuple[int, int]]
    per_peer_blocks = False  # whether each peer may read a block of its own (in_block): over the windows and LL

    def __init__(self, ctx: Any, local: Any, out: Any, count: int, *, in_block: int | None = None,
                 out_block: int = 0, op: Any = None, post: Any = None, root: int | None = None,
                 piece_bytes: int = 0) -> None:  # fmt: skip
        self.ctx, self.local, self.out, self.count = ctx, local, out, count
        self.rank, self.nranks, self.root = ctx.rank, ctx.nranks, root
        self.in_block, self.out_block, self.op, self.post = in_block, out_block, op, post
        self.piece_bytes = piece_bytes  # the most a round moves per block, where a protocol cuts by bytes (0: its own)
        self.peers = [p for p in range(ctx.nranks) if p != ctx.rank]
        self.sources = self.peers if root is None else [] if root == ctx.rank else [root]

    def _copies_own(self) -> bool:
        """Whether this rank's own block of the output is elsewhere than its input's (else there is nothing to copy):
        decided once, at the plan."""
        if self.root is not None:  # a broadcast: the root's whole input
            return not memory.same_memory(self.local, self.out)
        r, b, size = self.rank, self.in_block or 0, self.out_block
        return not memory.same_memory(self.out[r * size : (r + 1) * size], self.local[r * b : r * b + size])

    def send(self, lo: int, hi: int) -> list[Any]:
        """Copy in: post ``local[q*in_block + lo : q*in_block + hi]`` where each peer ``q`` reads it."""
        raise NotImplementedError

    def copy_send(self, lo: int, hi: int) -> list[Any]:
        """:meth:`send`, and ``out[me*out_block + lo : ...] = local[me*in_block + lo : ...]`` (none in place)."""
        raise NotImplementedError

    def recv(self, lo: int, hi: int) -> list[Any]:
        """Load: ``out[p*out_block + lo : p*out_block + hi] =`` what ``p`` posted, for every source ``p``."""
        raise NotImplementedError

    def recv_reduce_copy(self, lo: int, hi: int) -> list[Any]:
        """Load, reduce and store: ``out[lo:hi] = op(what rank 0 posted, ..., what rank n-1 posted)``."""
        raise NotImplementedError

    def release(self) -> list[Any]:
        """No peer reads this rank's memory in place here: nothing to wait for."""
        return []


class SimpleProtocol(OneShot):
    """The one-shot primitives through FIFOs: a chunk of ``ctx.chunk_elems`` per peer per step.

    Example::

        prims = SimpleProtocol(ctx, x, y, x.size, op="sum")
        steps = [*prims.send(0, 64), *prims.recv_reduce_copy(0, 64)]   # send to every peer, fold all in rank order

    A FIFO carries the same chunk to every peer it sends to, so a call in which each peer reads its own block of
    the input (``in_block``: an all-to-all, a reduce-scatter) has no one-shot form here: the plan runs the pairwise
    exchange or the ring instead (:data:`nbcoll.comm.algorithms.direct.THROUGH_FIFOS`).

    >>> SimpleProtocol.per_peer_blocks
    False
    """

    def __init__(self, ctx: Any, local: Any, out: Any, count: int, **shape: Any) -> None:
        super().__init__(ctx, local, out, count, **shape)
        if self.in_block is not None:
            raise ValueError(f"in_block: expected None (a FIFO sends every peer the same data), got {self.in_block}")
        self.pieces = spans(count, ctx.chunk_elems)
        peers, root = self.peers, self.root
        if self.op is not None:  # a fold: one part that sends to every peer and receives from every peer
            self.fold = ctx.prims(local, out, recv_from=peers, send_to=peers, op=self.op, post=self.post,
                                  local_position=ctx.rank)  # fmt: skip
        elif root is None or root == ctx.rank:  # a copy: one part that sends, one that receives from each source
            self.sender = ctx.prims(local, out, send_to=peers)
        self.receivers = {p: ctx.prims(local, out, recv_from=[p]) for p in self.sources if self.op is None}

    def send(self, lo: int, hi: int) -> list[Step]:
        return [self.fold.send(lo, hi) if self.op is not None else self.sender.send(lo, hi)]

    def copy_send(self, lo: int, hi: int) -> list[Step]:
        return [self.sender.copy_send(lo, hi, out_at=self.rank * self.out_block + lo)]

    def recv(self, lo: int, hi: int) -> list[Step]:
        b = self.out_block
        return [self.receivers[p].recv(p * b + lo, p * b + hi) for p in self.sources]

    def recv_reduce_copy(self, lo: int, hi: int) -> list[Step]:
        return [self.fold.recv_reduce_copy(lo, hi)]
