"""Ring algorithms: every rank receives from its left neighbour and sends to its right one.

All-reduce is NCCL's ``runRing`` of ``all_reduce.h``: a reduce-scatter, where each block travels once round the
ring gathering every rank's contribution and ends complete on one rank, then an all-gather, where each complete
block travels round again. On ``n`` ranks that is ``2(n-1)`` steps per round, and each rank sends
``2(n-1)/n`` of the buffer: the lower bound for any all-reduce (the bus bandwidth factor of nccl-tests).

Traffic, exactly: the buffer goes round in rounds of ``n`` blocks (:func:`~.common.rounds`); in each round rank
``r`` sends every block but block ``r`` in the first half and every block but block ``r+1`` in the second, so
it sends ``2 * round - size(block r) - size(block r+1)`` elements per round.

Broadcast and reduce are pipelined chains (a ring with one link cut), and all-gather and reduce-scatter are the
two halves of the all-reduce on their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcoll.comm.algorithms.common import Context, chunks, rounds
from nbcoll.comm.primitives import Primitive


def _neighbours(ctx: Context) -> tuple[int, int]:
    return (ctx.rank - 1) % ctx.nranks, (ctx.rank + 1) % ctx.nranks


def _piece(block: int, count: int, lo: int, hi: int) -> tuple[int, int]:
    """Elements ``[lo, hi)`` of rank ``block``'s block of ``count`` elements, as a range of the whole buffer."""
    return block * count + lo, block * count + hi


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Primitive]:
    """``out = op(local of every rank)``; ``out`` may be ``local`` (in place)."""
    n, r = ctx.nranks, ctx.rank
    prev, nxt = _neighbours(ctx)
    prims = ctx.prims(recv_from=[prev], send_to=[nxt], op=ctx.op, post=ctx.post)
    for block in rounds(local.size, n, ctx.chunk_elems):
        # Reduce-scatter: block r-1 starts here; each step adds this rank's part and passes it on.
        lo, hi = block[(r - 1) % n]
        yield prims.send(local[lo:hi], (lo, hi))
        for j in range(2, n):
            lo, hi = block[(r - j) % n]
            yield prims.recv_reduce_send(local[lo:hi], (lo, hi))
        # Block r arrives with every other rank's part: add ours, and it is final.
        lo, hi = block[r]
        yield prims.recv_reduce_copy_send(local[lo:hi], out[lo:hi], (lo, hi))
        # All-gather: pass on each final block, keeping a copy.
        for j in range(1, n - 1):
            lo, hi = block[(r - j) % n]
            yield prims.recv_copy_send(out[lo:hi], (lo, hi))
        lo, hi = block[(r + 1) % n]
        yield prims.recv(out[lo:hi], (lo, hi))


def reduce_scatter(ctx: Context, local: Any, out: Any) -> Iterator[Primitive]:
    """``out = op over ranks of local[rank * count : (rank + 1) * count]`` with ``count = out.size``."""
    n, r, count = ctx.nranks, ctx.rank, out.size
    prev, nxt = _neighbours(ctx)
    prims = ctx.prims(recv_from=[prev], send_to=[nxt], op=ctx.op, post=ctx.post)
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        a, b = _piece((r - 1) % n, count, lo, hi)
        yield prims.send(local[a:b], (a, b))
        for j in range(2, n):
            a, b = _piece((r - j) % n, count, lo, hi)
            yield prims.recv_reduce_send(local[a:b], (a, b))
        a, b = _piece(r, count, lo, hi)
        yield prims.recv_reduce_copy(local[a:b], out[lo:hi], (a, b))


def all_gather(ctx: Context, local: Any, out: Any) -> Iterator[Primitive]:
    """``out[rank * count : (rank + 1) * count] = local of that rank`` with ``count = local.size``."""
    n, r, count = ctx.nranks, ctx.rank, local.size
    prev, nxt = _neighbours(ctx)
    prims = ctx.prims(recv_from=[prev], send_to=[nxt])
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        a, b = _piece(r, count, lo, hi)
        yield prims.copy_send(local[lo:hi], out[a:b], (a, b))
        for j in range(1, n - 1):
            a, b = _piece((r - j) % n, count, lo, hi)
            yield prims.recv_copy_send(out[a:b], (a, b))
        a, b = _piece((r + 1) % n, count, lo, hi)
        yield prims.recv(out[a:b], (a, b))


def broadcast(ctx: Context, src: Any, out: Any, root: int) -> Iterator[Primitive]:
    """A chain from ``root`` round the ring: each rank keeps every chunk and passes it on."""
    n, r = ctx.nranks, ctx.rank
    prev, nxt = _neighbours(ctx)
    position = (r - root) % n
    if position == 0:
        prims = ctx.prims(send_to=[nxt])
        for lo, hi in chunks(0, out.size, ctx.chunk_elems):
            yield prims.copy_send(src[lo:hi], out[lo:hi], (lo, hi))
    elif position < n - 1:
        prims = ctx.prims(recv_from=[prev], send_to=[nxt])
        for lo, hi in chunks(0, out.size, ctx.chunk_elems):
            yield prims.recv_copy_send(out[lo:hi], (lo, hi))
    else:
        prims = ctx.prims(recv_from=[prev])
        for lo, hi in chunks(0, out.size, ctx.chunk_elems):
            yield prims.recv(out[lo:hi], (lo, hi))


def reduce(ctx: Context, local: Any, out: Any, root: int) -> Iterator[Primitive]:
    """A chain that ends at ``root``: each rank adds its part and passes the partial sum on."""
    n, r = ctx.nranks, ctx.rank
    prev, nxt = _neighbours(ctx)
    position = (r - root - 1) % n  # root is last
    if position == 0:
        prims = ctx.prims(send_to=[nxt])
        for lo, hi in chunks(0, local.size, ctx.chunk_elems):
            yield prims.send(local[lo:hi], (lo, hi))
    elif position < n - 1:
        prims = ctx.prims(recv_from=[prev], send_to=[nxt], op=ctx.op)
        for lo, hi in chunks(0, local.size, ctx.chunk_elems):
            yield prims.recv_reduce_send(local[lo:hi], (lo, hi))
    else:
        prims = ctx.prims(recv_from=[prev], op=ctx.op, post=ctx.post)
        for lo, hi in chunks(0, local.size, ctx.chunk_elems):
            yield prims.recv_reduce_copy(local[lo:hi], out[lo:hi], (lo, hi))
