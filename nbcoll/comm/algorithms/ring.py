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

Every function here runs once per channel, on the channel's part of the buffer (``ctx.part``; of each rank's
block for all-gather and reduce-scatter), so with two channels two rings turn at once, each on its own
connections; the traffic above then holds for each channel's part.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcoll.comm.algorithms.common import Context, chunks, rounds
from nbcoll.comm.primitives import Step


def _neighbours(ctx: Context) -> tuple[int, int]:
    return (ctx.rank - 1) % ctx.nranks, (ctx.rank + 1) % ctx.nranks


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """``out = op(local of every rank)``; ``out`` may be ``local`` (in place)."""
    n, r = ctx.nranks, ctx.rank
    prev, nxt = _neighbours(ctx)
    prims = ctx.prims(local, out, recv_from=[prev], send_to=[nxt], op=ctx.op, post=ctx.post)
    lo, hi = ctx.part(0, local.size)
    for block in rounds(hi - lo, n, ctx.chunk_elems, start=lo):
        # Reduce-scatter: block r-1 starts here; each step adds this rank's part and passes it on.
        yield prims.send(*block[(r - 1) % n])
        for j in range(2, n):
            yield prims.recv_reduce_send(*block[(r - j) % n])
        # Block r arrives with every other rank's part: add ours, and it is final.
        yield prims.recv_reduce_copy_send(*block[r])
        # All-gather: pass on each final block, keeping a copy.
        for j in range(1, n - 1):
            yield prims.recv_copy_send(*block[(r - j) % n])
        yield prims.recv(*block[(r + 1) % n])


def reduce_scatter(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """``out = op over ranks of local[rank * count : (rank + 1) * count]`` with ``count = out.size``."""
    n, r, count = ctx.nranks, ctx.rank, out.size
    prev, nxt = _neighbours(ctx)
    prims = ctx.prims(local, out, recv_from=[prev], send_to=[nxt], op=ctx.op, post=ctx.post)
    for lo, hi in chunks(*ctx.part(0, count), ctx.chunk_elems):
        block = (r - 1) % n
        yield prims.send(block * count + lo, block * count + hi)
        for j in range(2, n):
            block = (r - j) % n
            yield prims.recv_reduce_send(block * count + lo, block * count + hi)
        yield prims.recv_reduce_copy(r * count + lo, r * count + hi, out_at=lo)


def all_gather(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """``out[rank * count : (rank + 1) * count] = local of that rank`` with ``count = local.size``."""
    n, r, count = ctx.nranks, ctx.rank, local.size
    prev, nxt = _neighbours(ctx)
    prims = ctx.prims(local, out, recv_from=[prev], send_to=[nxt])
    for lo, hi in chunks(*ctx.part(0, count), ctx.chunk_elems):
        yield prims.copy_send(lo, hi, out_at=r * count + lo)
        for j in range(1, n - 1):
            block = (r - j) % n
            yield prims.recv_copy_send(block * count + lo, block * count + hi)
        block = (r + 1) % n
        yield prims.recv(block * count + lo, block * count + hi)


def broadcast(ctx: Context, src: Any, out: Any, root: int) -> Iterator[Step]:
    """A chain from ``root`` round the ring: each rank keeps every chunk and passes it on."""
    n, r = ctx.nranks, ctx.rank
    prev, nxt = _neighbours(ctx)
    position = (r - root) % n
    if position == 0:
        prims = ctx.prims(src, out, send_to=[nxt])
        for lo, hi in chunks(*ctx.part(0, out.size), ctx.chunk_elems):
            yield prims.copy_send(lo, hi)
    elif position < n - 1:
        prims = ctx.prims(src, out, recv_from=[prev], send_to=[nxt])
        for lo, hi in chunks(*ctx.part(0, out.size), ctx.chunk_elems):
            yield prims.recv_copy_send(lo, hi)
    else:
        prims = ctx.prims(src, out, recv_from=[prev])
        for lo, hi in chunks(*ctx.part(0, out.size), ctx.chunk_elems):
            yield prims.recv(lo, hi)


def reduce(ctx: Context, local: Any, out: Any, root: int) -> Iterator[Step]:
    """A chain that ends at ``root``: each rank adds its part and passes the partial sum on."""
    n, r = ctx.nranks, ctx.rank
    prev, nxt = _neighbours(ctx)
    position = (r - root - 1) % n  # root is last
    if position == 0:
        prims = ctx.prims(local, out, send_to=[nxt])
        for lo, hi in chunks(*ctx.part(0, local.size), ctx.chunk_elems):
            yield prims.send(lo, hi)
    elif position < n - 1:
        prims = ctx.prims(local, out, recv_from=[prev], send_to=[nxt], op=ctx.op)
        for lo, hi in chunks(*ctx.part(0, local.size), ctx.chunk_elems):
            yield prims.recv_reduce_send(lo, hi)
    else:
        prims = ctx.prims(local, out, recv_from=[prev], op=ctx.op, post=ctx.post)
        for lo, hi in chunks(*ctx.part(0, local.size), ctx.chunk_elems):
            yield prims.recv_reduce_copy(lo, hi)
