"""Direct (one-shot) algorithms: every rank talks to every other rank, in one step.

For a small message the cost of a collective is its number of steps, not its bytes. A one-shot all-reduce
takes a single step: each rank sends its whole buffer to every peer and folds what it receives. It moves
``n-1`` times the buffer per rank (a ring moves under twice), so it wins only while latency dominates; the tuner
knows where that ends. NCCL's one-shot all-reduce reads the peers' buffers in place over NVLink; here the peers'
data arrive through the same FIFOs as every other algorithm, one chunk per peer per step.

When every rank is on one machine and reached over ipc, the peers' data are not sent at all: each rank writes
its chunk into its own *window*, which every other rank has mapped, and then reads all the windows in place, as
NCCL's one-shot kernels read their peers' buffers over NVLink (:mod:`nbcoll.comm.window`). A small message uses
the LL protocol instead (:mod:`nbcoll.comm.ll`): each 8-byte line carries its data and the round number together,
so a round is one store and one poll, with no flag to wait for. Elsewhere the chunks travel through the same
FIFOs as every other algorithm, one chunk per peer per step.

Every rank folds the contributions in rank order, so all ranks compute bit-for-bit the same floating-point
result, as a ring does.

Gather and scatter are direct too: the root receives from, or sends to, each peer in turn. A small all-to-all is
one-shot over LL lines, each rank writing one segment per peer; without LL it is the pairwise exchange. A small
reduce-scatter is the same round with a fold of the segments in rank order; without LL it is the ring.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcoll.comm.algorithms import pairwise, ring
from nbcoll.comm.algorithms.common import Context, chunks
from nbcoll.comm.primitives import Step


def _peers(ctx: Context) -> list[int]:
    return [p for p in range(ctx.nranks) if p != ctx.rank]


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Send every chunk to every peer, then fold every peer's chunk with ours, in rank order."""
    peers = _peers(ctx)
    prims = ctx.prims(local, out, recv_from=peers, send_to=peers, op=ctx.op, post=ctx.post, local_position=ctx.rank)
    if ctx.ll is not None:  # small: data and ready flag in one store, nothing to wait for before writing
        for lo, hi in chunks(0, local.size, ctx.ll.capacity(local.dtype)):
            yield ctx.ll.send(prims, lo, hi)
            yield ctx.ll.recv_reduce_copy(prims, lo, hi)
        return
    if ctx.windows is not None:
        for lo, hi in chunks(0, local.size, ctx.windows.nbytes // local.dtype.itemsize):
            yield prims.direct_send(lo, hi)
            yield prims.direct_recv_reduce_copy(lo, hi)
        return
    for lo, hi in chunks(0, local.size, ctx.chunk_elems):
        yield prims.send(lo, hi)
        yield prims.recv_reduce_copy(lo, hi)


def all_gather(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Send our block to every peer; receive each peer's block into its place."""
    count, r = local.size, ctx.rank
    if ctx.ll is not None:
        prims = ctx.prims(local, out)
        for lo, hi in chunks(0, count, ctx.ll.capacity(local.dtype)):
            yield ctx.ll.send(prims, lo, hi)
            yield prims.copy(lo, hi, out_at=r * count + lo)
            yield ctx.ll.recv(prims, lo, hi, block=count)
        return
    if ctx.windows is not None:
        prims = ctx.prims(local, out, recv_from=_peers(ctx), send_to=_peers(ctx))
        for lo, hi in chunks(0, count, ctx.windows.nbytes // local.dtype.itemsize):
            yield prims.direct_send(lo, hi)
            yield prims.copy(lo, hi, out_at=r * count + lo)
            yield prims.direct_recv(lo, hi, block=count)
        return
    send = ctx.prims(local, out, send_to=_peers(ctx))
    recv = {peer: ctx.prims(local, out, recv_from=[peer]) for peer in _peers(ctx)}
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        yield send.copy_send(lo, hi, out_at=r * count + lo)
        for peer in _peers(ctx):
            yield recv[peer].recv(peer * count + lo, peer * count + hi)


def all_to_all(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Every rank writes its n blocks, one LL segment each; every rank reads its own segment of every peer's lines.

    One-shot only over LL (:mod:`nbcoll.comm.ll`): elsewhere it is the pairwise exchange.
    """
    if ctx.ll is None:
        yield from pairwise.all_to_all(ctx, local, out)
        return
    n, r, count = ctx.nranks, ctx.rank, out.size // ctx.nranks
    prims = ctx.prims(local, out)
    for lo, hi in chunks(0, count, ctx.ll.capacity(local.dtype, segments=n)):
        yield ctx.ll.send(prims, lo, hi, block=count, segments=n)
        yield prims.copy(r * count + lo, r * count + hi)
        yield ctx.ll.recv(prims, lo, hi, block=count, segment=r)


def reduce_scatter(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Every rank writes its n blocks, one LL segment each; every rank folds its own segment of every rank's lines.

    One-shot only over LL (:mod:`nbcoll.comm.ll`), folding in rank order; elsewhere it is the ring.
    """
    if ctx.ll is None:
        yield from ring.reduce_scatter(ctx, local, out)
        return
    n, r, count = ctx.nranks, ctx.rank, out.size
    prims = ctx.prims(local, out, op=ctx.op, post=ctx.post)
    for lo, hi in chunks(0, count, ctx.ll.capacity(local.dtype, segments=n)):
        yield ctx.ll.send(prims, lo, hi, block=count, segments=n)
        yield ctx.ll.recv_reduce_copy(prims, lo, hi, block=count, segment=r)


def gather(ctx: Context, local: Any, out: Any, root: int) -> Iterator[Step]:
    """The root receives each peer's block in rank order; the others send theirs."""
    count, r = local.size, ctx.rank
    if r != root:
        prims = ctx.prims(local, out, send_to=[root])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.send(lo, hi)
        return
    own = ctx.prims(local, out)
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        yield own.copy(lo, hi, out_at=r * count + lo)
    for peer in _peers(ctx):
        prims = ctx.prims(local, out, recv_from=[peer])
        for lo, hi in chunks(peer * count, (peer + 1) * count, ctx.chunk_elems):
            yield prims.recv(lo, hi)


def scatter(ctx: Context, local: Any, out: Any, root: int) -> Iterator[Step]:
    """The root sends each peer its block in rank order; the others receive theirs."""
    count, r = out.size, ctx.rank
    if r != root:
        prims = ctx.prims(local, out, recv_from=[root])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.recv(lo, hi)
        return
    own = ctx.prims(local, out)
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        yield own.copy(r * count + lo, r * count + hi, out_at=lo)
    for peer in _peers(ctx):
        prims = ctx.prims(local, out, send_to=[peer])
        for lo, hi in chunks(peer * count, (peer + 1) * count, ctx.chunk_elems):
            yield prims.send(lo, hi)
