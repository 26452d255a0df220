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
from nbcoll.comm.primitives import Primitive


def all_to_all(ctx: Context, local: Any, out: Any) -> Iterator[Primitive]:
    """``out[p*count : (p+1)*count]`` of rank ``r`` is ``local[r*count : (r+1)*count]`` of rank ``p``."""
    n, r, count = ctx.nranks, ctx.rank, out.size // ctx.nranks
    for lo, hi in chunks(0, count, ctx.chunk_elems):
        a, b = r * count + lo, r * count + hi
        yield ctx.copy(local[a:b], out[a:b], (a, b))
    for step in range(1, n):
        to, frm = (r + step) % n, (r - step) % n
        send, recv = ctx.prims(send_to=[to]), ctx.prims(recv_from=[frm])
        for lo, hi in chunks(0, count, ctx.chunk_elems):
            yield send.send(local[to * count + lo : to * count + hi], (to * count + lo, to * count + hi))
            yield recv.recv(out[frm * count + lo : frm * count + hi], (frm * count + lo, frm * count + hi))


def barrier(ctx: Context, token: Any) -> Iterator[Primitive]:
    """The dissemination barrier, with empty messages: only their arrival matters."""
    distance = 1
    while distance < ctx.nranks:
        to, frm = (ctx.rank + distance) % ctx.nranks, (ctx.rank - distance) % ctx.nranks
        yield ctx.prims(send_to=[to]).send(token[:0], (0, 0))
        yield ctx.prims(recv_from=[frm]).recv(token[:0], (0, 0))
        distance *= 2
