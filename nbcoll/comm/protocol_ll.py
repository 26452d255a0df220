"""The LL protocol's one-shot primitives: the same names as the other protocols', over 8-byte lines with flags.

As NCCL's ``prims_ll.h`` is ``Primitives`` specialized for LL with the method names of ``prims_simple.h``, this
is :mod:`nbcoll.comm.protocol_simple`'s vocabulary over the LL buffers (:mod:`nbcoll.comm.ll`): every line holds
4 bytes of data and the round number, so a round is one store and one poll, with no flag to wait for. A round of
the one-shot collectives is then *one* step, :class:`~nbcoll.comm.ll_step.LLStep`, in which this rank writes its
lines first thing in the poll, as an NCCL LL primitive writes and reads in one pass::

    send(lo, hi); recv_reduce_copy(lo, hi)   ll_send_recv_reduce_copy: write, poll, fold every rank's words
    copy_send(lo, hi); recv(lo, hi)          ll_send_recv: write, copy our own block, poll, copy every peer's
    copy_send(lo, hi)   (a broadcast root)   ll_send (and a copy of its input, unless in place)
    recv(lo, hi)        (a broadcast reader) ll_recv: write a presence line, poll the root's, copy its words

So a send here yields no step of its own: the round's receive writes its lines, unless this rank receives nothing
in the round (a broadcast's root). All-to-all and reduce-scatter write one *segment* per peer (``in_block``),
each padded to whole words, and each rank reads its own segment of every peer's lines. The rounds are numbered
when the object is bound, at the plan (``reserve``), as the windows' are.

Example::

    prims = LLProtocol(ctx, x, y, x.size, op="sum")     # ctx.ll: the LL buffers
    (lo, hi), = prims.pieces                            # a message of up to NBCOLL_LL_BYTES: one round
    steps = [*prims.send(lo, hi), *prims.recv_reduce_copy(lo, hi)]   # [ll_send_recv_reduce_copy]
"""

from __future__ import annotations

from typing import Any

from nbcoll.comm.ll_step import LLStep
from nbcoll.comm.primitives import COPY, DIRECT, POST, RECV, REDUCE, SEND, Flag
from nbcoll.comm.protocol_simple import OneShot, spans


class LLProtocol(OneShot):
    """The one-shot primitives over the LL buffers (``ctx.ll``): one :class:`~nbcoll.comm.ll_step.LLStep` a round.

    Example::

        prims = LLProtocol(ctx, x, out, count, in_block=count, out_block=count)   # an all-to-all's
        steps = [*prims.copy_send(0, count), *prims.recv(0, count)]               # [ll_send_recv]
    """

    per_peer_blocks = True

    def __init__(self, ctx: Any, local: Any, out: Any, count: int, **shape: Any) -> None:
        super().__init__(ctx, local, out, count, **shape)
        self.ll = ll = ctx.ll
        self.prims = ctx.prims(local, out, op=self.op, post=self.post)
        per_peer = self.in_block is not None  # one segment per peer, each peer reading its own
        self.segments, self.segment = (self.nranks, self.rank) if per_peer else (1, 0)
        self.pieces = spans(count, ll.capacity(self.prims.dtype, segments=self.segments))
        first = ll.reserve(len(self.pieces))
        self.rounds = {lo: first + i for i, (lo, _) in enumerate(self.pieces)}  # each piece's round
        self.own = self.root is not None and self._copies_own()  # a broadcast root's copy of its input
        self.posted: tuple[int, bool] | None = None  # the piece sent and not yet written, and whether with our own

    def _step(self, flags: Flag, lo: int, hi: int, block: int, **how: Any) -> LLStep:
        return self.ll.step_class(self.ll, self.prims, flags, lo, hi, self.rounds[lo], block, self.segments,
                                  self.segment, **how)  # fmt: skip

    def send(self, lo: int, hi: int) -> list[LLStep]:
        """``lines(me) = round | local[q*in_block + lo : ...]`` (segment ``q`` for peer ``q``): written by the
        round's receive, in its step."""
        return self._post(lo, hi, own=False)

    def copy_send(self, lo: int, hi: int) -> list[Any]:
        """:meth:`send`, and this rank's own block into ``out`` (none in place): the round's receive does both,
        before its poll, so they overlap the wait for the peers. A broadcast's root, which receives nothing,
        writes its lines in a step of its own, then copies its input into its output."""
        if self.root is None:
            return self._post(lo, hi, own=True)
        copy = [self.prims.copy(lo, hi)] if self.own else []
        return [self._step(DIRECT | SEND, lo, hi, 0), *copy]

    def _post(self, lo: int, hi: int, own: bool) -> list[LLStep]:
        self.posted = (lo, own)
        return []

    def _sent(self, lo: int) -> tuple[Flag, bool]:
        """The flags of the piece's send, if it was sent (``SEND``, and whether to copy our own block first)."""
        posted, self.posted = self.posted, None
        if posted is None or posted[0] != lo:
            return Flag(0), False
        return SEND, posted[1]

    def recv(self, lo: int, hi: int) -> list[LLStep]:
        """``out[p*out_block + lo : ...] = segment of p's words`` for every source ``p``, once its lines carry the
        round; after a send of the piece, the write (and our own block) first, in the same step.

        A broadcast's reader first writes its *presence* line of the round (``line 0 of lines(me) = round``, no
        data): it has begun the round, which is what the root's next writes wait for (:mod:`nbcoll.comm.ll`).
        """
        if self.root is not None:
            return [self._step(DIRECT | RECV | COPY, lo, hi, 0, sources=list(self.sources), announce=True)]
        sent, own = self._sent(lo)
        return [self._step(DIRECT | sent | RECV | COPY, lo, hi, self.out_block, own=own)]

    def recv_reduce_copy(self, lo: int, hi: int) -> list[LLStep]:
        """``out[lo:hi] = op(words of rank 0, ..., of rank n-1)``, in rank order, once every peer's lines carry the
        round (a reduce-scatter's: the segment of this rank); after a send of the piece, its write first."""
        sent, _ = self._sent(lo)
        flags = DIRECT | sent | RECV | REDUCE | COPY | (POST if self.post is not None else Flag(0))
        return [self._step(flags, lo, hi, self.in_block or 0)]
