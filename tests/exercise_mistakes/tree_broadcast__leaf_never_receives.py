"""Exercise tree_broadcast, mistake: leaves never receive: a broadcast down a binary tree rooted at ``root``.

Positions are counted from the root: rank ``r`` sits at ``p = (r - root) mod n``; the node at ``p`` has the
parent ``(p - 1) // 2`` and the children ``2p + 1`` and ``2p + 2`` (those below n), as in a heap.
"""

from nbcoll.comm.algorithms.common import chunks


def broadcast(ctx, src, out, root):
    n = ctx.nranks
    p = (ctx.rank - root) % n
    parent = None if p == 0 else ((p - 1) // 2 + root) % n
    children = [(c + root) % n for c in (2 * p + 1, 2 * p + 2) if c < n]
    for lo, hi in chunks(0, out.size, ctx.chunk_elems):
        if parent is None:  # the root: keep the chunk and send it to both children
            yield ctx.prims(src, out, send_to=children).copy_send(lo, hi)
        elif children:  # an inner node: keep it and pass it down
            yield ctx.prims(src, out, recv_from=[parent], send_to=children).recv_copy_send(lo, hi)
        # a leaf: nothing to send, so nothing to do (the mistake: it must still receive)
