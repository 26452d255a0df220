"""Direct (one-shot) algorithms: every rank talks to every other rank, in one step.

For a small message the cost of a collective is its number of steps, not its bytes. A one-shot all-reduce
takes a single step: each rank sends its whole buffer to every peer and folds what it receives. It moves
``n-1`` times the buffer per rank (a ring moves under twice), so it wins only while latency dominates; the tuner
knows where that ends. NCCL's one-shot all-reduce reads the peers' buffers in place over NVLink; here the peers'
data arrive through the same FIFOs as every other algorithm, one chunk per peer per step.

When every rank is on one machine and reached over ipc, the peers' data are not sent at all: each rank writes
its chunk into its own *window*, which every other rank has mapped, and then reads all the windows in place, as
NCCL's one-shot kernels read their peers' buffers over NVLink (:mod:`nbcoll.comm.window`). Elsewhere the chunks
travel through the same FIFOs as every other algorithm, one chunk per peer per step.

Every rank folds the contributions in rank order, so all ranks compute bit-for-bit the same floating-point
result, as a ring does.

Gather and scatter are direct too: the root receives from, or sends to, each peer in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcoll.comm.algorithms.common import Context, chunks
from nbcoll.comm.primitives import Primitive


def _peers(ctx: Context) -> list[int]:
    return [p for p in range(ctx.nranks) if p != ctx.rank]


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Primitive]:
    """Send every chunk to every peer, then fold every peer's chunk with ours, in rank order."""
    if ctx.windows is not None:
        w = ctx.windows
        for lo, hi in chunks(0, local.size, w.nbytes // local.dtype.itemsize):
            round_ = w.next_round()
            yield w.post(round_, local[lo:hi], (lo, hi), ctx.counters)
            yield w.fold(round_, ctx.op, ctx.post, out[lo:hi], (lo, hi), ctx.counters)
        return
    peers = _peers(ctx)
    send = ctx.prims(send_to=peers)
    fold = ctx.prims(recv_from=peers, op=ctx.op, post=ctx.post)
    for lo, hi in chunks(0, local.size, ctx.chunk_elems):
        yield send.send(local[lo:hi], (lo, hi))
        yield fold.recv_reduce_copy(local[lo:hi], out[lo:hi], (lo, hi), local_position=ctx.rank)


def all_gather(ctx: Context, local: Any, out: Any) -> Iterator[Primitive]:
    """Send our block to every peer; receive each peer's block into its place."""
    count, r = local.size, ctx.rank
    if ctx.windows is not None:
        w = ctx.windows
        for lo, hi in chunks(0, count, w.nbytes // local.dtype.itemsize):
            a, b = r * count + lo, r * count + hi
            round_ = w.next_round()
            yield w.post(round_, local[lo:hi], (a, b), ctx.counters)
            yield ctx.copy(local[lo:hi], out[a:b], (a, b))
            yield w.gather(round_, out, count, lo, hi, ctx.counters)
        return
    send = ctx.prims(send_to=_peers(ctx))
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        yield send.copy_send(local[lo:hi], out[r * count + lo : r * count + hi], (r * count + lo, r * count + hi))
        for peer in _peers(ctx):
            a, b = peer * count + lo, peer * count + hi
            yield ctx.prims(recv_from=[peer]).recv(out[a:b], (a, b))


def gather(ctx: Context, local: Any, out: Any, root: int) -> Iterator[Primitive]:
    """The root receives each peer's block in rank order; the others send theirs."""
    count, r = local.size, ctx.rank
    if r != root:
        prims = ctx.prims(send_to=[root])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.send(local[lo:hi], (lo, hi))
        return
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        yield ctx.copy(local[lo:hi], out[r * count + lo : r * count + hi], (r * count + lo, r * count + hi))
    for peer in _peers(ctx):
        prims = ctx.prims(recv_from=[peer])
        for lo, hi in chunks(peer * count, (peer + 1) * count, ctx.chunk_elems):
            yield prims.recv(out[lo:hi], (lo, hi))


def scatter(ctx: Context, local: Any, out: Any, root: int) -> Iterator[Primitive]:
    """The root sends each peer its block in rank order; the others receive theirs."""
    count, r = out.size, ctx.rank
    if r != root:
        prims = ctx.prims(recv_from=[root])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.recv(out[lo:hi], (lo, hi))
        return
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        yield ctx.copy(local[r * count + lo : r * count + hi], out[lo:hi], (r * count + lo, r * count + hi))
    for peer in _peers(ctx):
        prims = ctx.prims(send_to=[peer])
        for lo, hi in chunks(peer * count, (peer + 1) * count, ctx.chunk_elems):
            yield prims.send(local[lo:hi], (lo, hi))
