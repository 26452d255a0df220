"""Exercise tree_broadcast: a broadcast down a binary tree, in nbcoll's primitives (tutorial 09 explains trees).

A chain broadcast needs n - 1 hops before the last rank has the data; a binary tree needs about log2(n). Lay the
ranks on a heap counted from the root: rank ``r`` sits at position ``p = (r - root) mod n``, the node at ``p``
has the parent ``(p - 1) // 2`` and the children ``2p + 1`` and ``2p + 2`` (those below n); turn positions back
into ranks by adding ``root`` (mod n). Send the buffer chunk by chunk (``chunks(0, out.size, ctx.chunk_elems)``
gives the ``(lo, hi)`` spans), so the data flows down the tree as a pipeline::

    ctx.prims(src, out, send_to=children).copy_send(lo, hi)                     the root
    ctx.prims(src, out, recv_from=[parent], send_to=children).recv_copy_send(lo, hi)
    ctx.prims(src, out, recv_from=[parent]).recv(lo, hi)                        a leaf

``ctx.prims(src, out, ...)`` binds the primitives to the two buffers and the peers once; each call then names
only the element range ``[lo, hi)`` it moves.

The check runs your function as nbcoll's tree broadcast on 2, 3 and 4 ranks with several roots, beside the
reference, and reports the first step whose chunk or peer differs. Check your work with::

    python -m nbcoll exercise tree_broadcast --check tree_broadcast.py
"""

from nbcoll.comm.algorithms.common import chunks  # noqa: F401


def broadcast(ctx, src, out, root):
    # Plan, for rank r of n:
    #   1. p = its position from the root; its parent (None for the root) and children, as ranks
    #   2. for each chunk: the root copy_sends it to its children; an inner node receives it from its parent,
    #      keeps it and sends it on (recv_copy_send); a leaf only receives it (recv)
    raise NotImplementedError("broadcast: yield the tree's primitives")
    yield  # a generator, like every algorithm
