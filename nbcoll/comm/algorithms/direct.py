"""Direct (one-shot) algorithms: every rank talks to every other rank, in one step.

For a small message the cost of a collective is its number of steps, not its bytes. A one-shot all-reduce
takes a single step: each rank posts its whole buffer where every peer reads it and folds what every rank posted.
It moves ``n-1`` times the buffer per rank (a ring moves under twice), so it wins only while latency dominates;
the tuner knows where that ends.

Each algorithm here has one body, written in the one-shot primitives (:mod:`nbcoll.comm.protocol_simple`), and
reads like PyTorch's one-shot kernels: copy in, barrier, load (and reduce), store, barrier::

    prims = ctx.one_shot(local, out, count, ...)  # the protocol the plan chose; its rounds numbered now
    for lo, hi in prims.pieces:
        yield from prims.send(lo, hi)             # copy in: post our piece where every peer reads it
        yield from prims.recv_reduce_copy(lo, hi) # barrier; load every rank's piece, reduce in rank order, store
    yield from prims.release()                    # barrier: no peer still reads what we lent

Each function binds its primitives when it is called, which is when the call is planned, so that their rounds
are numbered in the order every rank plans its calls (not the order in which steps run, which differs between
ranks with two collectives in flight), and returns the generator of its steps.

The plan chooses the protocol that carries them, once (:func:`nbcoll.comm.planning.protocol_for`):

* LL lines, for a message of up to ``NBCOLL_LL_BYTES`` per rank when every peer is on this machine
  (:mod:`nbcoll.comm.protocol_ll`): each 8-byte line carries its data and the round number together, so a round
  is one store and one poll, in one step, with no flag to wait for;
* the direct windows, for a larger one (:mod:`nbcoll.comm.protocol_direct`): the peers' registered buffers
  (``comm.alloc()``) are read in place, as NCCL's one-shot kernels read their peers' over NVLink, and any other
  buffer is staged in its owner's window, in pieces that take the window's two halves in turn;
* FIFOs elsewhere (:class:`~nbcoll.comm.protocol_simple.SimpleProtocol`), one chunk per peer per step. A FIFO
  carries the same chunk to every peer, so the all-to-all and the reduce-scatter, in which each peer reads its own
  block, are then the pairwise exchange and the ring (:data:`THROUGH_FIFOS`).

All-gather and all-to-all copy each peer's block straight into their output; a reduce-scatter folds this rank's
block of every rank's input; a broadcast's readers copy the root's buffer. Every rank folds the contributions in
rank order, so all ranks compute bit-for-bit the same floating-point result, as a ring does. The protocol modules
say what each primitive is in their protocol (a step, two, or none of its own), and how a broadcast's root and
readers keep the rounds' credit chain unbroken.

Gather and scatter are direct too, through FIFOs: the root receives from, or sends to, each peer in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from nbcoll.comm.algorithms import pairwise, ring
from nbcoll.comm.algorithms.common import Context, chunks
from nbcoll.comm.primitives import Step
from nbcoll.comm.protocol_direct import PIECE_BYTES, piece_elems, window_bytes  # noqa: F401  (read from here too)
from nbcoll.comm.protocol_simple import OneShot


def _peers(ctx: Context) -> list[int]:
    return [p for p in range(ctx.nranks) if p != ctx.rank]


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Post our input where every peer reads it, then fold every rank's, in rank order."""
    return _fold(ctx.one_shot(local, out, local.size, op=ctx.op, post=ctx.post))


def reduce_scatter(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Post block ``q`` of our input for each reader ``q``; fold our own block of every rank's input, in rank
    order (through FIFOs: the ring)."""
    count = out.size
    return _fold(ctx.one_shot(local, out, count, in_block=count, op=ctx.op, post=ctx.post,
                              piece_bytes=fold_piece_bytes(ctx.nranks)))  # fmt: skip


def _fold(prims: OneShot) -> Iterator[Step]:
    """The rounds of an all-reduce or a reduce-scatter (PyTorch's one-shot all-reduce)."""
    for lo, hi in prims.pieces:
        yield from prims.send(lo, hi)  # copy in: where every peer reads it
        yield from prims.recv_reduce_copy(lo, hi)  # barrier; load every rank's piece, reduce, store
    yield from prims.release()  # barrier: no peer still reads what this rank lent


def all_gather(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Post our block for every peer and copy it into its place; copy each peer's block into its own."""
    count = local.size
    return _exchange(ctx.one_shot(local, out, count, out_block=count, piece_bytes=GATHER_PIECE_BYTES))


def all_to_all(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Post block ``q`` of our input for each peer ``q``; copy our block of every peer's input into its place in
    the output (through FIFOs: the pairwise exchange)."""
    count = out.size // ctx.nranks
    return _exchange(ctx.one_shot(local, out, count, in_block=count, out_block=count))


def _exchange(prims: OneShot) -> Iterator[Step]:
    """The rounds of an all-gather or an all-to-all: post, copy our own block while the peers' posts are on their
    way (unless it is in place), then read every peer's block into its own."""
    for lo, hi in prims.pieces:
        yield from prims.copy_send(lo, hi)  # copy in, and our own block into its place
        yield from prims.recv(lo, hi)  # barrier; load every peer's block into its place
    yield from prims.release()  # barrier


def broadcast(ctx: Context, src: Any, out: Any, root: int) -> Iterator[Step]:
    """The root posts its buffer (and copies it into its output, unless in place); every other rank copies it."""
    prims = ctx.one_shot(src, out, out.size, root=root, piece_bytes=broadcast_piece_bytes(ctx.nranks))
    return _broadcast(prims, ctx.rank == root)


def _broadcast(prims: OneShot, is_root: bool) -> Iterator[Step]:
    for lo, hi in prims.pieces:
        yield from prims.copy_send(lo, hi) if is_root else prims.recv(lo, hi)
    yield from prims.release()


THROUGH_FIFOS: dict[str, Callable[..., Iterator[Step]]] = {
    "all_to_all": pairwise.all_to_all,
    "reduce_scatter": ring.reduce_scatter,
}
"""What the plan runs for a direct call of these through FIFOs (:func:`nbcoll.comm.planning.plan_call`), where
each peer reading its own block of the input has no one-shot form: a FIFO carries the same chunk to every peer."""


BROADCAST_PIECE_BYTES = PIECE_BYTES
"""A broadcast's pieces: the others' size. They were half as large for a while, for the pipeline of two copies on
two cores of a staged broadcast (the root's into its window, the readers' out of it), which wants the piece the
root has just written to be still in a cache when a reader copies it; NCCL's broadcast also moves a smaller chunk
than its all-reduce (one FIFO step against ``NCCL_STEPS/2``). Compared in the same launch, in two launches
(``benchmarks/lab/one_shot_pieces.py``, 1 to 64 MiB), pieces of 1 MiB took 0.69-0.92 of the time of pieces of 512 KiB
with registered buffers at 2 and 4 ranks; 0.64-0.95 staged at 4 ranks; and staged at 2 ranks 0.50-1.01, except a
1 MiB message, which then takes one round instead of a pipeline of two (0.90-1.12). Every rank must cut the
same rounds, and a reader cannot know whether the root's buffer is registered, so one size serves both. The
benchmark sets this name to compare sizes; a broadcast reads it when it is planned."""

MANY_RANKS_BROADCAST_PIECE_BYTES = 4 << 20
"""A broadcast's pieces from three ranks on: half the window there (``NBCOLL_BUFFSIZE`` for every two ranks), so
that a broadcast of up to 4 MiB is one round. From three ranks on the root copies nothing into its window (it
lends its input, registered or by its address) unless the ranks may not read each other's memory, and every
round costs each rank its waits, which on shared cores come one after the other. Compared in the same launch
(``benchmarks/lab/one_shot_pieces.py``), pieces of 4 MiB took 0.76-0.86 of the time of pieces of 1 MiB with
registered buffers from 4 MiB up at 3 and 4 ranks (one cell 1.00), 0.77-0.97 read by address from 16 MiB up and at
4 ranks (a 3-rank 4 MiB broadcast 0.86-1.47 in three launches), and 0.78-0.99 staged (``benchmarks/lab/NOTES.md``). At
two ranks the root stages a plain input, whose pipeline of two copies wants the smaller pieces (pieces of half the
window took 1.19x the time for 4 MiB). The benchmark sets this name to compare sizes; a broadcast reads it when
it is planned."""

GATHER_PIECE_BYTES = 2 * PIECE_BYTES
"""An all-gather's pieces: twice the others', since nothing is folded and, at 2 ranks, half a window of
``NBCOLL_BUFFSIZE`` still holds one. Each round of an all-gather is two steps (the post, which then copies our own
block, and the read of the peers' blocks), and a step costs about 15 us of Python on the machine of the
Performance page, against about 130 us to copy 1 MiB there while the other rank copies too: at 64 MiB, pieces of
1 MiB spent about a tenth of the call between copies. ``benchmarks/lab/one_shot_pieces.py --collective all_gather``
compares the two sizes in one launch; the benchmark sets this name, and an all-gather reads it when it is
planned."""


FOLD_ROUND_BYTES = 2 << 20
"""A reduce-scatter's round, the pieces of all its blocks together, takes at most this many bytes: each rank folds
one block from every rank in a round, and the fold's operands had best stay in a core's caches as they stream
through. Staged through the windows at 4 ranks, pieces of 1 MiB (4 MiB a round) took 1.17-1.46x the time of pieces
of 512 KiB at 16 and 64 MiB, in two launches; at 2 ranks a round of two 1 MiB pieces is as fast as any."""


def fold_piece_bytes(nranks: int) -> int:
    """A reduce-scatter's pieces (per block): :data:`PIECE_BYTES`, or less where ``nranks`` of them would take more
    than :data:`FOLD_ROUND_BYTES`."""
    return min(PIECE_BYTES, FOLD_ROUND_BYTES // max(1, nranks))


def broadcast_piece_bytes(nranks: int) -> int:
    """A broadcast's pieces on ``nranks``: :data:`BROADCAST_PIECE_BYTES` at two, where the root stages a plain
    input, :data:`MANY_RANKS_BROADCAST_PIECE_BYTES` from three on. Every rank cuts the same rounds by it (a reader
    cannot know whether the root's buffer is registered); the tuner counts them by it too."""
    return BROADCAST_PIECE_BYTES if nranks <= 2 else MANY_RANKS_BROADCAST_PIECE_BYTES


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
