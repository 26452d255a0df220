"""What every algorithm shares: the rank's context, NCCL's ``Primitives`` object, and how data is cut up.

An algorithm is a generator function. It yields one :class:`~nbcoll.comm.primitives.Primitive` per step of this
rank's part of the collective, and the communicator runs them in order, each when its peers are ready::

    def all_reduce(ctx, local, out):
        prims = ctx.prims(recv_from=[prev], send_to=[next], op=ctx.op)
        for lo, hi in ...:
            yield prims.send(local[lo:hi], span=(lo, hi))
            ...

Every step moves at most one chunk of ``ctx.chunk_elems`` elements (one FIFO slot), so no rank can fill a
FIFO and wait for a neighbour that is itself waiting: the deadlock-freedom argument is per step, as in NCCL,
where each loop iteration moves at most a slice of the buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from nbcoll.comm import primitives
from nbcoll.comm.primitives import PostOp, Primitive

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


def rounds(count: int, parts: int, chunk_elems: int) -> Iterator[list[Span]]:
    """The buffer in rounds of ``parts`` blocks of at most one chunk each (NCCL's outer loop of a ring).

    A round covers up to ``parts * chunk_elems`` elements, cut into ``parts`` near-equal blocks, so each step of
    the round moves at most one chunk. The last round may be short; its blocks shrink (some to zero).
    """
    per_round = parts * chunk_elems
    for base in range(0, count, per_round):
        yield blocks(base, min(base + per_round, count), parts)


class Prims:
    """NCCL's ``Primitives`` object: the peers one part of an algorithm receives from and sends to, and its op.

    Example::

        prims = ctx.prims(recv_from=[prev], send_to=[next], op="sum")
        step = prims.recv_reduce_send(local[0:64], span=(0, 64))
    """

    def __init__(self, ctx: Context, recv_from: list[int], send_to: list[int], op: Any, post: PostOp | None):
        self.recv_conns = [ctx.recv_connection(p) for p in recv_from]
        self.send_conns = [ctx.send_connection(p) for p in send_to]
        self.op = op
        self.post = post
        self.counters = ctx.counters

    def _kw(self, span: Span) -> dict:
        return {"counters": self.counters, "span": span}

    def send(self, local: Any, span: Span) -> Primitive:
        return primitives.send(self.send_conns, local, **self._kw(span))

    def recv(self, dst: Any, span: Span) -> Primitive:
        return primitives.recv(self.recv_conns[0], dst, **self._kw(span))

    def recv_reduce_send(self, local: Any, span: Span) -> Primitive:
        return primitives.recv_reduce_send(self.recv_conns, self.send_conns[0], local, self.op, **self._kw(span))

    def recv_copy_send(self, dst: Any, span: Span) -> Primitive:
        return primitives.recv_copy_send(self.recv_conns[0], self.send_conns, dst, **self._kw(span))

    def recv_reduce_copy(self, local: Any, dst: Any, span: Span, local_position: int = 0) -> Primitive:
        return primitives.recv_reduce_copy(
            self.recv_conns, local, dst, self.op, self.post, local_position=local_position, **self._kw(span)
        )

    def recv_reduce_copy_send(self, local: Any, dst: Any, span: Span) -> Primitive:
        return primitives.recv_reduce_copy_send(
            self.recv_conns, self.send_conns, local, dst, self.op, self.post, **self._kw(span)
        )

    def copy_send(self, local: Any, dst: Any, span: Span) -> Primitive:
        return primitives.copy_send(local, dst, self.send_conns, **self._kw(span))


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

    def prims(
        self, recv_from: list[int] = (), send_to: list[int] = (), op: Any = None, post: PostOp | None = None
    ) -> Prims:
        return Prims(self, list(recv_from), list(send_to), op, post)

    def copy(self, local: Any, dst: Any, span: Span) -> Primitive:
        """A local copy, as a step, so that it runs in order with the others (and shows in traces)."""
        return Primitive("copy", local=local, dst=dst, span=span)

    def finish(self, dst: Any, span: Span) -> Primitive:
        """The post-op (avg's division) on a value that is already final on this rank, as a step."""
        return Primitive("post_op", local=dst, dst=dst, post=self.post, span=span)
