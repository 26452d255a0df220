"""Exercise ring_all_reduce, reference solution: the ring all-reduce in nbcoll's primitives.

Rank r receives from its left neighbour r - 1 and sends to its right one r + 1. The buffer goes round in rounds
of n blocks. In each round, a reduce-scatter: every block travels once round the ring, each rank adding its part,
so block r ends complete on rank r after n - 1 steps; then an all-gather: each complete block goes round again.
"""

from nbcoll.comm.algorithms.common import rounds


def all_reduce(ctx, local, out):
    n, r = ctx.nranks, ctx.rank
    prev, nxt = (r - 1) % n, (r + 1) % n
    prims = ctx.prims(local, out, recv_from=[prev], send_to=[nxt], op=ctx.op, post=ctx.post)
    for block in rounds(local.size, n, ctx.chunk_elems):
        # Reduce-scatter: send block r - 1; add our part to each block that passes; block r ends here, final.
        lo, hi = block[(r - 1) % n]
        yield prims.send(lo, hi)
        for j in range(2, n):
            lo, hi = block[(r - j) % n]
            yield prims.recv_reduce_send(lo, hi)
        lo, hi = block[r]
        yield prims.recv_reduce_copy_send(lo, hi)
        # All-gather: keep each final block that arrives and pass it on; the last one only needs keeping.
        for j in range(1, n - 1):
            lo, hi = block[(r - j) % n]
            yield prims.recv_copy_send(lo, hi)
        lo, hi = block[(r + 1) % n]
        yield prims.recv(lo, hi)
