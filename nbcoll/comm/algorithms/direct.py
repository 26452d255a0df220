"""Direct (one-shot) algorithms: every rank talks to every other rank, in one step.

For a small message the cost of a collective is its number of steps, not its bytes. A one-shot all-reduce
takes a single step: each rank sends its whole buffer to every peer and folds what it receives. It moves
``n-1`` times the buffer per rank (a ring moves under twice), so it wins only while latency dominates; the tuner
knows where that ends. NCCL's one-shot all-reduce reads the peers' buffers in place over NVLink; here the peers'
data arrive through the same FIFOs as every other algorithm, one chunk per peer per step.

When every rank is on one machine and reached over ipc, the peers' data are not sent at all, as NCCL's one-shot
kernels read their peers' buffers over NVLink (:mod:`nbcoll.comm.window`). A buffer from ``comm.alloc()`` is
*registered*: every peer has mapped it, so it is read in place and each byte is copied once per hop, straight
into the reader's output. Any other buffer is staged: its owner copies each chunk into its own *window*, which
every peer has mapped, and the peers read the window. A large message goes in pieces that take the window's two
halves in turn, so that an owner stages one while its peers still read the last (:func:`_window_rounds`). A
small message (up to ``NBCOLL_LL_BYTES`` per rank) uses the LL protocol instead (:mod:`nbcoll.comm.ll`): each
8-byte line carries its data and the round number together, so a round is one store and one poll, with no flag
to wait for. Elsewhere the chunks travel through the same FIFOs as every other algorithm, one chunk per peer per
step.

All-gather, broadcast and all-to-all read this way too: each rank copies its block of every peer's buffer
straight into its output. A broadcast root, which has nothing to read, writes a share of each chunk straight
into every reader's registered output instead (NCCL's direct write), so that its core copies too. A small
all-to-all is one LL round in which each rank writes one segment per peer; a small reduce-scatter is the same
round with a fold of the segments in rank order, and a larger one folds this rank's block of every peer's buffer
or window, read in place. In a small broadcast only the root writes data; every other rank writes one presence
line, which keeps the rounds' credit chain unbroken (:mod:`nbcoll.comm.ll`). Without LL or windows the
all-to-all is the pairwise exchange and the reduce-scatter the ring.

Every rank folds the contributions in rank order, so all ranks compute bit-for-bit the same floating-point
result, as a ring does.

The one-shot rounds, LL and window alike, are numbered when the collective is planned (``reserve``), not when
its steps run: with two collectives in flight, the ranks may take their steps in different orders, but they plan
them in the same one.

Gather and scatter are direct too: the root receives from, or sends to, each peer in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from nbcoll import memory
from nbcoll.comm.algorithms import pairwise, ring
from nbcoll.comm.algorithms.common import Context, chunks
from nbcoll.comm.primitives import Step


def _peers(ctx: Context) -> list[int]:
    return [p for p in range(ctx.nranks) if p != ctx.rank]


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Send every chunk to every peer, then fold every peer's chunk with ours, in rank order."""
    if ctx.ll is not None:  # small: data and ready flag in one store, nothing to wait for before writing
        return _ll_round(ctx, local, out, local.size, segments=1, reduce=True)
    if ctx.windows is not None:
        return _one_shot_reduce(ctx, local, out, _window_rounds(ctx, local.size, local, blocks=1))
    return _fifo_reduce(ctx, local, out)


def _one_shot_reduce(ctx: Context, local: Any, out: Any, rounds: list[WindowRound]) -> Iterator[Step]:
    prims = ctx.prims(local, out, op=ctx.op, post=ctx.post)
    for round_, lo, hi, at, after in rounds:
        yield prims.direct_send(lo, hi, round_, at=at, after=after)
        yield prims.direct_recv_reduce_copy(lo, hi, round_, at=at)
    if prims.lent is not None:  # the peers read our own buffer: wait until they are done
        yield prims.direct_release()


def _fifo_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    peers = _peers(ctx)
    prims = ctx.prims(local, out, recv_from=peers, send_to=peers, op=ctx.op, post=ctx.post, local_position=ctx.rank)
    for lo, hi in chunks(0, local.size, ctx.chunk_elems):
        yield prims.send(lo, hi)
        yield prims.recv_reduce_copy(lo, hi)


def all_gather(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Send our block to every peer; receive each peer's block into its place."""
    if ctx.ll is not None:
        return _ll_round(ctx, local, out, local.size, segments=1, reduce=False)
    if ctx.windows is not None:
        rounds = _window_rounds(ctx, local.size, local, blocks=1, piece_bytes=GATHER_PIECE_BYTES)
        return _one_shot_gather(ctx, local, out, rounds)
    return _fifo_gather(ctx, local, out)


def _one_shot_gather(ctx: Context, local: Any, out: Any, rounds: list[WindowRound]) -> Iterator[Step]:
    return _one_shot_blocks(ctx, local, out, rounds, block=local.size, in_block=0)  # every peer reads all of local


def _fifo_gather(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    count, r = local.size, ctx.rank
    send = ctx.prims(local, out, send_to=_peers(ctx))
    recv = {peer: ctx.prims(local, out, recv_from=[peer]) for peer in _peers(ctx)}
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        yield send.copy_send(lo, hi, out_at=r * count + lo)
        for peer in _peers(ctx):
            yield recv[peer].recv(peer * count + lo, peer * count + hi)


def broadcast(ctx: Context, src: Any, out: Any, root: int) -> Iterator[Step]:
    """Every rank reads the root's buffer (its LL lines when small); without windows, the root sends every chunk to
    every peer."""
    if ctx.ll is not None:
        spans = list(chunks(0, out.size, ctx.ll.capacity(out.dtype)))
        return _ll_broadcast(ctx, src, out, root, spans, ctx.ll.reserve(len(spans)))
    if ctx.windows is not None:
        rounds = _window_rounds(ctx, out.size, out, blocks=1, piece_bytes=broadcast_piece_bytes(ctx.nranks))
        return _one_shot_broadcast(ctx, src, out, root, rounds)
    return _fifo_broadcast(ctx, src, out, root)


def _one_shot_broadcast(ctx: Context, src: Any, out: Any, root: int, rounds: list[WindowRound]) -> Iterator[Step]:
    """Every reader copies the root's piece, except the tail share that the root writes into its output itself
    when that output is registered (NCCL's direct write): then both ends' cores copy, 1/n of the piece each.

    The root stages round ``k + 1`` in the other half of its window while the readers still copy round ``k``
    (:func:`_window_rounds`), so the two copies of a staged byte overlap. At two ranks that pipeline keeps both
    cores copying, and the root never lends a large plain input by its address (the kernel's copy, alone on the
    reader's core, took 1.2-2.1x the staged time from 4 MiB up); from three ranks on it does, since a root that
    stages every piece for all its readers is what they wait for (the staged broadcast took 2.8-3.1x the time of
    the kernel's copies at 4 ranks, 4-64 MiB; ``NBCOLL_CMA_BYTES``).
    """
    r, in_place = ctx.rank, _in_place(src, out)
    prims = ctx.prims(src, out, by_address=r == root and ctx.nranks > 2)  # see the docstring
    target = None if r == root else ctx.windows.find(out)  # where a reader's output is registered, if it is
    for round_, lo, hi, at, after in rounds:
        cut = hi - (hi - lo) // ctx.nranks  # the root's share: [cut, hi)
        if r == root:
            yield prims.direct_send(lo, hi, round_, at=at, after=after)
            if not in_place:
                yield prims.copy(lo, hi)
            yield prims.direct_write(cut, hi, round_)
        else:
            yield prims.direct_open(cut, hi, round_, root, target)
            yield prims.direct_recv(lo, hi if target is None else cut, round_, sources=[root], at=at)
    if prims.lent is not None or target is not None:  # peers read our buffer, or the root writes into it: wait
        yield prims.direct_release()


def _ll_broadcast(ctx: Context, src: Any, out: Any, root: int, spans: list, first: int) -> Iterator[Step]:
    """The root writes its lines; every other rank writes a presence line, then copies the root's words (one
    step)."""
    ll, prims, in_place = ctx.ll, ctx.prims(src, out), _in_place(src, out)
    for round_, (lo, hi) in enumerate(spans, first):
        if ctx.rank == root:
            yield ll.send(prims, lo, hi, round_)
            if not in_place:
                yield prims.copy(lo, hi)
        else:
            yield ll.recv(prims, lo, hi, round_, block=0, sources=[root], announce=True)  # a presence line first


def _in_place(src: Any, out: Any) -> bool:
    """Whether the root's output is its input: then it has nothing to copy (decided once, at the plan)."""
    return memory.same_memory(src, out)


def _fifo_broadcast(ctx: Context, src: Any, out: Any, root: int) -> Iterator[Step]:
    if ctx.rank == root:
        prims = ctx.prims(src, out, send_to=_peers(ctx))
        for lo, hi in chunks(0, out.size, ctx.chunk_elems):
            yield prims.copy_send(lo, hi)
        return
    prims = ctx.prims(src, out, recv_from=[root])
    for lo, hi in chunks(0, out.size, ctx.chunk_elems):
        yield prims.recv(lo, hi)


def all_to_all(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Every rank reads its block of every peer's input in place: one LL segment per peer when small, else
    straight from the peers' buffers or windows; without either, the pairwise exchange."""
    if ctx.ll is not None:
        return _ll_round(ctx, local, out, out.size // ctx.nranks, segments=ctx.nranks, reduce=False)
    if ctx.windows is None:
        return pairwise.all_to_all(ctx, local, out)
    rounds = _window_rounds(ctx, out.size // ctx.nranks, local, blocks=ctx.nranks)
    return _one_shot_all_to_all(ctx, local, out, rounds)


def _one_shot_all_to_all(ctx: Context, local: Any, out: Any, rounds: list[WindowRound]) -> Iterator[Step]:
    count = out.size // ctx.nranks
    return _one_shot_blocks(ctx, local, out, rounds, block=count, in_block=count)  # peer p reads block p of local


def _one_shot_blocks(ctx: Context, local: Any, out: Any, rounds: list[WindowRound], block: int,
                     in_block: int) -> Iterator[Step]:  # fmt: skip
    """The rounds of an all-gather (``in_block`` 0) or an all-to-all: post, and copy our own block into ``out``
    while the peers' posts are on their way (unless it is in place); then read every peer's block into its own."""
    r = ctx.rank
    prims = ctx.prims(local, out)
    own_in = local[r * in_block : r * in_block + block]
    copy_own = not memory.same_memory(out[r * block : (r + 1) * block], own_in)  # in place: nothing to copy
    for round_, lo, hi, at, after in rounds:
        if copy_own:
            yield prims.direct_copy_send(lo, hi, round_, out_block=block, in_block=in_block, at=at, after=after)
        else:
            yield prims.direct_send(lo, hi, round_, in_block=in_block, at=at, after=after)
        yield prims.direct_recv(lo, hi, round_, sources=_peers(ctx), out_block=block, in_block=in_block, at=at)
    if prims.lent is not None:  # the peers read our own buffer: wait until they are done
        yield prims.direct_release()


PIECE_BYTES = 1 << 20
"""A one-shot collective over the windows goes in rounds of this many bytes (per block) at most: small enough
that a piece being staged and the one being read stay in a core's caches, large enough that a round's two waits
cost little beside its copies. On the CPU the size also picks how the C library copies: glibc copies from 2 KiB
up to its ``rep_movsb_stop_threshold`` (the L2 cache's size on AMD cores, 1 MiB on the machine of the Performance
page) with one ``rep movsb``, and larger blocks with vector loops. There, ``rep movsb`` reads shared pages (a
registered buffer, a window) slowly: with two ranks copying at once, pieces of 512 KiB took up to twice the time
of pieces of 1 MiB (a 64 MiB all-gather 14-16 ms against 8-10), in the same launch
(``benchmarks/lab/NOTES.md``). On a GPU a piece is one kernel launch, and 1 MiB keeps its blocks busy."""

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


def window_bytes(buffsize: int, nranks: int) -> int:
    """Bytes of each rank's window: ``NBCOLL_BUFFSIZE`` (``buffsize``) for every two ranks.

    An all-to-all's round stages one piece for each reader in one half of the window, so a window of a fixed size
    would cut its pieces as the ranks grow: at 4 ranks, 4 MiB windows gave pieces of 512 KiB, and the all-to-all
    of 16 and 64 MiB with registered buffers took 1.4-2x the time it took with 8 MiB windows and pieces of 1 MiB,
    in the same launch (``benchmarks/lab/windows.py``). With ``NBCOLL_BUFFSIZE`` for every two ranks, the pieces stay
    as large as at 2 ranks.
    """
    return buffsize * ((nranks + 1) // 2)


def piece_elems(itemsize: int, window_bytes: int, piece_bytes: int = PIECE_BYTES) -> int:
    """Elements per round (per block) of a one-shot collective over ``window_bytes`` of window (per block):
    ``piece_bytes``, or half the window if that is less, since the rounds take its two halves in turn. The tuner
    counts the rounds by the same rule."""
    return max(1, min(piece_bytes, window_bytes // 2) // itemsize)


class WindowRound(NamedTuple):
    """One round of a one-shot collective over the windows: elements ``[lo, hi)`` (of each block), its number,
    where a staged chunk lies in the window (``at``, bytes), and how many rounds back its post must wait for the
    peers to be done (``after``: the last round staged in the same bytes)."""

    number: int
    lo: int
    hi: int
    at: int
    after: int


def _window_rounds(
    ctx: Context, count: int, buf: Any, blocks: int, piece_bytes: int = PIECE_BYTES
) -> list[WindowRound]:
    """The rounds of ``count`` elements (per block) of a one-shot collective, numbered now (``reserve``).

    A round's pieces (:func:`piece_elems`; ``blocks`` of them when each reader has its own) fill at most half the
    window, and the rounds take the two halves in turn: a rank stages round ``k + 1`` while its peers still read
    round ``k``, waiting only for them to be done with round ``k - 1`` (``after = 2``). The first round waits for
    every round before it (``after = 1``), whatever an earlier collective staged where. A window too small for two
    halves of one element per block (a few bytes) takes every round whole, each waiting for the one before.
    """
    item = buf.dtype.itemsize
    elems = piece_elems(item, ctx.windows.nbytes // blocks, piece_bytes)
    spans = list(chunks(0, count, elems))
    first, half = ctx.windows.reserve(len(spans)), blocks * elems * item
    two = 2 * half <= ctx.windows.nbytes
    return [WindowRound(first + i, lo, hi, (i % 2) * half if two else 0, 2 if i and two else 1)
            for i, (lo, hi) in enumerate(spans)]  # fmt: skip


def reduce_scatter(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Every rank folds its own block of every rank's input, in rank order: read from the LL lines when small (one
    segment per rank), else in place from the peers' registered buffers or windows; without either, the ring."""
    if ctx.ll is not None:
        return _ll_round(ctx, local, out, out.size, segments=ctx.nranks, reduce=True)
    if ctx.windows is None:
        return ring.reduce_scatter(ctx, local, out)
    rounds = _window_rounds(ctx, out.size, local, blocks=ctx.nranks, piece_bytes=fold_piece_bytes(ctx.nranks))
    return _one_shot_reduce_scatter(ctx, local, out, rounds)


def _one_shot_reduce_scatter(ctx: Context, local: Any, out: Any, rounds: list[WindowRound]) -> Iterator[Step]:
    count = out.size
    prims = ctx.prims(local, out, op=ctx.op, post=ctx.post)
    for round_, lo, hi, at, after in rounds:  # lend, or stage block q for each reader q
        yield prims.direct_send(lo, hi, round_, in_block=count, at=at, after=after)
        yield prims.direct_recv_reduce_copy(lo, hi, round_, in_block=count, at=at)
    if prims.lent is not None:  # the peers read our own buffer: wait until they are done
        yield prims.direct_release()


def _ll_round(ctx: Context, local: Any, out: Any, count: int, segments: int, reduce: bool) -> Iterator[Step]:
    """Plan the LL rounds of a collective of ``count`` elements per block (numbered now) and return its steps."""
    spans = list(chunks(0, count, ctx.ll.capacity(local.dtype, segments=segments)))
    return _ll_steps(ctx, local, out, count, segments, reduce, spans, ctx.ll.reserve(len(spans)))


def _ll_steps(ctx: Context, local: Any, out: Any, count: int, segments: int, reduce: bool, spans: list,
              first: int) -> Iterator[Step]:  # fmt: skip
    """One LL round per span: write this rank's lines, then fold or copy every peer's.

    ``segments`` = 1: all-reduce (fold) or all-gather (copy each peer's block); ``segments`` = n: reduce-scatter
    (fold this rank's segment of every rank) or all-to-all (copy this rank's segment of every peer).
    """
    ll, r = ctx.ll, ctx.rank
    prims = ctx.prims(local, out, op=ctx.op, post=ctx.post) if reduce else ctx.prims(local, out)
    block = count if segments > 1 else 0  # where each segment's data lie in the input
    segment = r if segments > 1 else 0  # which segment of every rank's lines this rank reads
    for round_, (lo, hi) in enumerate(spans, first):  # one step a round: write, (copy its own block,) poll, read
        if reduce:
            yield ll.send_recv_reduce_copy(prims, lo, hi, round_, block=block, segments=segments, segment=segment)
        else:  # all-gather or all-to-all: each block of the output is count long
            yield ll.send_recv(prims, lo, hi, round_, block=count, segments=segments, segment=segment)


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
