"""Recursive halving and doubling: Rabenseifner's all-reduce, in ``2 log2(n)`` steps of shrinking messages.

On a power of two ranks, reduce-scatter by recursive *halving*: at each round, pair with the rank whose number
differs in one bit, keep one half of the current segment and send the other; the partner does the opposite,
and both fold what they receive into the half they keep. After ``log2(n)`` rounds each rank holds one
``1/n``-th of the buffer, fully reduced. Then all-gather by recursive *doubling*: the same pairs in reverse
order, each sending the part it has and receiving the part its partner has, until everyone has everything::

    rank:        0        1        2        3
    halving:  [ab|cd] <-> [ab|cd]  (bit 2: 0<->2, 1<->3; keep left or right half)
              [a|b] <-> [a|b]      (bit 1: 0<->1, 2<->3)
    doubling: the same pairs, bit 1 then bit 2, with the halves travelling back

Each rank sends ``2(n-1)/n`` of the buffer, as a ring does, but in ``2 log2(n)`` steps instead of ``2(n-1)``.

Other rank counts: with ``p`` the largest power of two not above ``n`` and ``extra = n - p``, the first
``2 * extra`` ranks pair up before and after. Each even one among them hands its whole buffer to the odd one
above it, sits out the power-of-two part, and gets the result back at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcoll.comm.algorithms.common import Context, chunks
from nbcoll.comm.primitives import Step


def _exchange(
    ctx: Context, partner: int, send: tuple[int, int], keep: tuple[int, int], out: Any, fold: bool
) -> Iterator[Step]:
    """Send ``out[send]`` to ``partner`` and receive into ``out[keep]`` (folded with it when ``fold``), chunk by chunk.

    The two ranges may differ in size by one element; each side sends and receives the same sequence of chunks
    as its partner receives and sends, so the chunks match one to one.
    """
    prims = ctx.prims(out, out, recv_from=[partner], send_to=[partner], op=ctx.op if fold else None)
    outgoing = list(chunks(*send, ctx.chunk_elems))
    incoming = list(chunks(*keep, ctx.chunk_elems))
    for i in range(max(len(outgoing), len(incoming))):
        if i < len(outgoing):
            yield prims.send(*outgoing[i])
        if i < len(incoming):
            yield prims.recv_reduce_copy(*incoming[i]) if fold else prims.recv(*incoming[i])


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """Rabenseifner's all-reduce; ``out`` first receives a copy of ``local`` and is then reduced in place."""
    n, r, count = ctx.nranks, ctx.rank, local.size
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    if out is not local:
        own = ctx.prims(local, out)
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield own.copy(lo, hi)

    # Fold the extra ranks in: rank 2i hands its buffer to rank 2i+1 and waits.
    if r < 2 * extra and r % 2 == 0:
        prims = ctx.prims(out, out, recv_from=[r + 1], send_to=[r + 1])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.send(lo, hi)
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.recv(lo, hi)
        return
    if r < 2 * extra:
        prims = ctx.prims(out, out, recv_from=[r - 1], op=ctx.op)
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.recv_reduce_copy(lo, hi)

    # From here on, p ranks numbered 0..p-1 ("virtual" ranks).
    vrank = r // 2 if r < 2 * extra else r - extra

    def real(v: int) -> int:
        return 2 * v + 1 if v < extra else v + extra

    # Reduce-scatter by recursive halving; remember each round's split to retrace it.
    lo, hi = 0, count
    history = []
    mask = p // 2
    while mask:
        mid = lo + (hi - lo) // 2
        lower = vrank & mask == 0
        keep, give = ((lo, mid), (mid, hi)) if lower else ((mid, hi), (lo, mid))
        yield from _exchange(ctx, real(vrank ^ mask), give, keep, out, fold=True)
        history.append((mask, keep, give))
        lo, hi = keep
        mask //= 2
    if ctx.post is not None:
        yield ctx.prims(out, out, post=ctx.post).post_op(lo, hi)

    # All-gather by recursive doubling: undo the halving, newest split first.
    for mask, keep, give in reversed(history):
        yield from _exchange(ctx, real(vrank ^ mask), keep, give, out, fold=False)

    # Hand the result back to the rank that sat out.
    if r < 2 * extra:
        prims = ctx.prims(out, out, send_to=[r - 1])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.send(lo, hi)
