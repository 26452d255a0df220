"""Tree algorithms: reduce up a binary tree, broadcast down it, pipelined chunk by chunk.

A ring needs ``2(n-1)`` steps before the last chunk is done; a tree needs about ``2 log2(n)``, which is why NCCL
uses trees for small messages and many ranks. The tree here is a heap: the node at position ``p`` has children
``2p+1`` and ``2p+2`` and parent ``(p-1)//2``, with position 0 at the root.

In a single tree the leaves (half the ranks) only ever send up and receive down, so half the links idle. NCCL's
*double binary tree* adds a second tree in which those leaves are inner nodes, and gives each tree half of the
data. Here the second tree is the mirror image of the first (position ``(n-p) mod n``), which keeps the root
and turns the leaves, the high positions, into inner nodes.

As NCCL does, the two trees run at once on separate channels: channel ``c`` runs tree ``c mod 2`` on its part of
the buffer, on its own connections, so a chunk of one tree can never be mistaken for one of the other, and the
progress loop moves whichever tree is ready. On a communicator of one channel (``NBCOLL_NCHANNELS=1``) the
trees share the connections, so they run one after the other: the first half of the buffer, then the second.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcoll.comm.algorithms.common import Context, chunks
from nbcoll.comm.primitives import Step


class HeapTree:
    """Parent and children of each rank in a binary heap laid over the ranks.

    Example::

        tree = HeapTree(nranks=5, root=0)
        tree.parent(3), tree.children(1)        # (1, [3, 4])
        HeapTree(5, root=0, mirrored=True)      # the second tree of the double binary tree
    """

    def __init__(self, nranks: int, root: int = 0, mirrored: bool = False) -> None:
        self.nranks, self.root, self.mirrored = nranks, root, mirrored

    def position(self, rank: int) -> int:
        p = (rank - self.root) % self.nranks
        return (self.nranks - p) % self.nranks if self.mirrored else p

    def rank_at(self, position: int) -> int:
        p = (self.nranks - position) % self.nranks if self.mirrored else position
        return (p + self.root) % self.nranks

    def parent(self, rank: int) -> int | None:
        p = self.position(rank)
        return None if p == 0 else self.rank_at((p - 1) // 2)

    def children(self, rank: int) -> list[int]:
        p = self.position(rank)
        return [self.rank_at(c) for c in (2 * p + 1, 2 * p + 2) if c < self.nranks]


def _up_then_down(ctx: Context, tree: HeapTree, local: Any, out: Any, lo: int, hi: int) -> Iterator[Step]:
    """All-reduce of ``[lo, hi)`` on one tree: chunks up to the root, then down again, a FIFO's worth at a time.

    Why a FIFO's worth: the root sends each finished chunk down at once, but a child reads from its parent only
    after its own chunks have gone up. With more chunks in flight than the FIFO has slots, the root would wait
    for a slot the child frees only later, while the child waits for the root to take its next chunk up.
    """
    parent, children = tree.parent(ctx.rank), tree.children(ctx.rank)
    pieces = list(chunks(lo, hi, ctx.chunk_elems))
    if parent is None:
        root = ctx.prims(local, out, recv_from=children, send_to=children, op=ctx.op, post=ctx.post)
    else:
        up = ctx.prims(local, out, recv_from=children, send_to=[parent], op=ctx.op)
        down = ctx.prims(local, out, recv_from=[parent], send_to=children)
    for first in range(0, len(pieces), ctx.fifo_steps):
        group = pieces[first : first + ctx.fifo_steps]
        if parent is None:
            for a, b in group:  # the root finishes each chunk and sends it straight back down
                yield root.recv_reduce_copy_send(a, b)
            continue
        for a, b in group:
            yield up.recv_reduce_send(a, b) if children else up.send(a, b)
        for a, b in group:
            yield down.recv_copy_send(a, b) if children else down.recv(a, b)


def all_reduce(ctx: Context, local: Any, out: Any) -> Iterator[Step]:
    """The double binary tree: half the buffer on one tree, half on its mirror; at once on two channels."""
    if ctx.nchannels > 1:
        lo, hi = ctx.part(0, local.size)
        yield from _up_then_down(ctx, HeapTree(ctx.nranks, mirrored=ctx.channel % 2 == 1), local, out, lo, hi)
        return
    half = local.size // 2
    yield from _up_then_down(ctx, HeapTree(ctx.nranks), local, out, 0, half)
    yield from _up_then_down(ctx, HeapTree(ctx.nranks, mirrored=True), local, out, half, local.size)


def broadcast(ctx: Context, src: Any, out: Any, root: int) -> Iterator[Step]:
    """Chunks flow down the tree rooted at ``root``; inner nodes keep and forward each one."""
    tree = HeapTree(ctx.nranks, root)
    parent, children = tree.parent(ctx.rank), tree.children(ctx.rank)
    prims = ctx.prims(src, out, recv_from=[parent] if parent is not None else [], send_to=children)
    for a, b in chunks(*ctx.part(0, out.size), ctx.chunk_elems):
        if parent is None:
            yield prims.copy_send(a, b)
        elif children:
            yield prims.recv_copy_send(a, b)
        else:
            yield prims.recv(a, b)


def reduce(ctx: Context, local: Any, out: Any, root: int) -> Iterator[Step]:
    """Partial results flow up the tree rooted at ``root``; each inner node adds its own part."""
    tree = HeapTree(ctx.nranks, root)
    parent, children = tree.parent(ctx.rank), tree.children(ctx.rank)
    up = [parent] if parent is not None else []
    prims = ctx.prims(local, out, recv_from=children, send_to=up, op=ctx.op, post=ctx.post if parent is None else None)
    for a, b in chunks(*ctx.part(0, local.size), ctx.chunk_elems):
        if parent is None:
            yield prims.recv_reduce_copy(a, b)
        elif children:
            yield prims.recv_reduce_send(a, b)
        else:
            yield prims.send(a, b)
