"""What every algorithm shares: the rank's context, which binds NCCL's ``Primitives``, and how data is cut up.

An algorithm is a generator function. It yields one :class:`~nbcoll.comm.primitives.Step` per step of this
rank's part of the collective, and the communicator runs them in order, each when its peers are ready::

    def all_reduce(ctx, local, out):
        prims = ctx.prims(local, out, recv_from=[prev], send_to=[next], op=ctx.op)
        for lo, hi in ...:
            yield prims.send(lo, hi)
            ...

Every step moves at most one chunk of ``ctx.chunk_elems`` elements (one FIFO slot), so no rank can fill a
FIFO and wait for a neighbour that is itself waiting: the deadlock-freedom argument is per step, as in NCCL,
where each loop iteration moves at most a slice of the buffer.

A one-shot algorithm binds its primitives with ``ctx.one_shot`` instead, to every peer at once, in the protocol
the plan chose (FIFOs, the direct windows or LL lines: :mod:`nbcoll.comm.protocol_simple`); each of its calls
returns the steps it takes in that protocol, which the algorithm yields with ``yield from``.

Channels, as NCCL's: a communicator joins every pair of ranks by ``NBCOLL_NCHANNELS`` connections. An algorithm
that can be split runs once per channel, each run on its own connections and its own part of the buffer,
``ctx.part(lo, hi)``; the progress loop interleaves the steps of all the runs, so that one channel moves while
another waits for a peer. Each run alone is deadlock-free, and no run waits for another's connections, so
together they are too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nbcoll import memory
from nbcoll.comm.primitives import PostOp, Prims, Step
from nbcoll.comm.protocol_simple import OneShot, SimpleProtocol

Span = tuple[int, int]


def split_evenly(total: int, parts: int) -> list[int]:
    """``parts`` sizes that add up to ``total`` and differ by at most one, larger first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def blocks(lo: int, hi: int, parts: int) -> list[Span]:
    """``[lo, hi)`` cut into ``parts`` consecutive blocks of :func:`split_evenly` sizes (some may be empty)."""
    spans, start = [], lo
    for size in split_evenly(hi - lo, parts):
        spans.append((start, start + size))
        start += size
    return spans


def chunks(lo: int, hi: int, chunk_elems: int) -> Iterator[Span]:
    """``[lo, hi)`` in pieces of at most ``chunk_elems``: what one step may move."""
    for start in range(lo, hi, chunk_elems):
        yield start, min(start + chunk_elems, hi)


def rounds(count: int, parts: int, chunk_elems: int, start: int = 0) -> Iterator[list[Span]]:
    """``[start, start + count)`` in rounds of ``parts`` blocks of at most one chunk each (NCCL's outer loop of a
    ring).

    A round covers up to ``parts * chunk_elems`` elements, cut into ``parts`` near-equal blocks, so each step of
    the round moves at most one chunk. The last round may be short; its blocks shrink (some to zero).
    """
    per_round = parts * chunk_elems
    end = start + count
    for base in range(start, end, per_round):
        yield blocks(base, min(base + per_round, end), parts)


@dataclass
class Context:
    """What an algorithm knows about this rank: who it is, how big a chunk is, and how to reach its peers."""

    rank: int
    nranks: int
    chunk_elems: int
    fifo_steps: int
    op: Any
    post: PostOp | None
    send_connection: Callable[[int], Any]
    recv_connection: Callable[[int], Any]
    counters: Callable[[int], Any]
    windows: Any = None  # DirectWindows, when every peer's buffer can be read in place (nbcoll.comm.window)
    ll: Any = None  # LLBuffers, when a one-shot collective is small enough for the LL protocol (nbcoll.comm.ll)
    channel: int = 0  # the channel this run of the algorithm uses: its connections and its part of the buffer
    nchannels: int = 1  # how many channels the collective is split across
    call: str = ""  # the collective and its algorithm, "all_gather (direct)": what a step's own errors name
    copies: Any = None  # a CopyPolicy (nbcoll.comm.copy_policy), where a CPU fast path streams some copies
    # what carries a one-shot call's primitives, chosen once by the plan: FIFOs, the windows (DirectProtocol) or
    # the LL lines (LLProtocol); see nbcoll.comm.protocol_simple
    protocol: type[OneShot] = SimpleProtocol

    def part(self, lo: int, hi: int) -> Span:
        """This channel's part of ``[lo, hi)``: the channels cut it into near-equal consecutive blocks.

        ``part = blocks(lo, hi, nchannels)[channel]``; on one channel, the whole of it.
        """
        if self.nchannels == 1:
            return lo, hi
        return blocks(lo, hi, self.nchannels)[self.channel]

    def prims(
        self,
        local: Any,
        out: Any,
        recv_from: Sequence[int] = (),
        send_to: Sequence[int] = (),
        op: Any = None,
        post: PostOp | None = None,
        local_position: int = 0,
        by_address: bool = True,
    ) -> Prims:
        """NCCL's ``Primitives`` for one part of an algorithm: bound to ``local`` (input), ``out`` and peers,
        through this channel's connections. ``by_address``: a large unregistered input may be lent by its address
        (:meth:`nbcoll.comm.window.DirectWindows.lend`)."""
        return Prims(
            local,
            out,
            recv=[self.recv_connection(p, self.channel) for p in recv_from],
            send=[self.send_connection(p, self.channel) for p in send_to],
            op=op,
            post=post,
            local_position=local_position,
            counters=self.counters,
            windows=self.windows,
            rank=self.rank,
            by_address=by_address,
            call=self.call,
            copies=self.copies,
        )

    def one_shot(self, local: Any, out: Any, count: int, **shape: Any) -> OneShot:
        """The primitives of a one-shot collective of ``count`` elements per block, in the protocol the plan chose
        (:mod:`nbcoll.comm.protocol_simple`): bound to ``local``, ``out`` and every peer, its rounds numbered now.
        ``shape``: ``in_block``, ``out_block``, ``op``, ``post``, ``root``, ``piece_bytes``."""
        return self.protocol(self, local, out, count, **shape)


def single_rank(ctx: Context, pairs: list[tuple[Any, Any]]) -> Iterator[Step]:
    """A communicator of one rank: every collective is a copy of each ``(src, dst)`` pair (and avg's division by
    one, which changes nothing); none where ``dst`` already is ``src``."""
    for src, dst in pairs:
        if src is None or dst is None or src.size == 0:
            continue
        if memory.address_range(src) != memory.address_range(dst):
            yield ctx.prims(src, dst).copy(0, int(dst.size))
