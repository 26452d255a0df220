"""Pairwise exchange: the all-to-all where, at step ``s``, rank ``r`` sends to ``r+s`` and receives from ``r-s``.

Every rank has a different block for every other rank, so there is nothing to combine and nothing to forward:
the only question is the order of the ``n-1`` exchanges. Shifting the partner by one each step means that at
every step each rank sends exactly one message and receives exactly one, so no link carries two at once.

The barrier here is the *dissemination* barrier, the same shape with doubling distances: at round ``k`` rank
``r`` signals ``r + 2^k`` and waits for ``r - 2^k``; after ``ceil(log2 n)`` rounds every rank has heard,
directly or through others, from every rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcoll.comm.algorithms.common import Context, chunks
from nbcoll.comm.primitives import Step


def all_to_all(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """``out[p*count : (p+1)*count]`` of rank ``r`` is ``local[r*count : (r+1)*count]`` of rank ``p``."""
    n, r, count = ctx.nranks, ctx.rank, out.size // ctx.nranks
    own = ctx.prims(local, out)
    for lo, hi in chunks(r * count, (r + 1) * count, ctx.chunk_elems):
        yield own.copy(lo, hi)
    for step in range(1, n):
        to, frm = (r + step) % n, (r - step) % n
        prims = ctx.prims(local, out, recv_from=[frm], send_to=[to])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield prims.send(to * count + lo, to * count + hi)
            yield prims.recv(frm * count + lo, frm * count + hi)


def barrier(ctx: Context, token: Any) -> Iterator[Step]:
    """The dissemination barrier, with empty messages: only their arrival matters."""
    distance = 1
    while distance < ctx.nranks:
        to, frm = (ctx.rank + distance) % ctx.nranks, (ctx.rank - distance) % ctx.nranks
        prims = ctx.prims(token, token, recv_from=[frm], send_to=[to])
        yield prims.send(0, 0)
        yield prims.recv(0, 0)
        distance *= 2
