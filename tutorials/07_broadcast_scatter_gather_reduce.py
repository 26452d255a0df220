"""
Rooted collectives: broadcast, reduce, scatter and gather, with the ring and the tree where both apply
======================================================================================================

What you learn here:

- what each rooted collective computes, written as the loop NCCL's documentation gives for it;
- the two shapes that move one buffer from one rank to all (broadcast) or from all to one (reduce): a *chain*
  round the ring, and a *binary tree*; who each rank receives from and sends to in each, and what it costs in
  bytes per rank (the counters say);
- that a message larger than one FIFO slot is pipelined chunk by chunk: on a chain of ``n`` ranks, ``k`` chunks
  take ``(n - 1) + (k - 1)`` steps, not ``(n - 1) x k``;
- scatter and gather, where the root talks to every other rank directly.

Run it with ``python tutorials/07_broadcast_scatter_gather_reduce.py``: it re-launches itself on 4 ranks and
prints each rank's output in turn.
"""

# %%
# Set-up
# ------
#
# ``relaunch(4)`` runs this script again on 4 ranks; everything after it runs on each of them. Every rank runs
# every collective below, checks its own result and prints it, so each rank's output tells the same story from
# that rank's point of view; the root changes from section to section. The FIFO is made tiny
# (``NBCOLL_BUFFSIZE=256``: 8 slots of 32 bytes) so that a buffer of 20 float32 travels as 3 chunks.
#
# Two helpers serve all sections: ``rank_data(r)`` is rank ``r``'s input, ``r*100 + i``, which any rank can
# rebuild to check a result, and ``traffic()`` reads this rank's byte counters, says to whom it sent and from
# whom it received, and resets them for the next collective.

import os

import nbcoll.launch

nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import numpy as np  # noqa: E402

# A FIFO of 8 slots of 32 bytes (8 float32): the buffers below span a few chunks each. Read at init().
os.environ.setdefault("NBCOLL_BUFFSIZE", "256")

import nbcoll  # noqa: E402
from nbcoll.comm import init  # noqa: E402
from nbcoll.comm.algorithms.tree import HeapTree  # noqa: E402

comm = init()
rank, n = comm.rank, comm.size
COUNT = 20  # float32 elements: 3 chunks of at most 8
chunk_elems = comm.config.chunk_bytes // 4
print(f"Tutorial 07 on the {nbcoll.get_backend()!r} backend: rank {rank} of {n}")
print(f"a chunk holds {chunk_elems} float32, so {COUNT} elements travel as {-(-COUNT // chunk_elems)} chunks")
print()


def rank_data(r: int, count: int = COUNT) -> np.ndarray:
    """Rank r's input, which every rank can rebuild to check the result: r*100 + 0, 1, 2, ..."""
    return (r * 100 + np.arange(count)).astype(np.float32)


def ranks_text(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks) or "-"


def traffic() -> str:
    """The bytes this rank sent and received since the last reset, and to whom."""
    counters = comm.counters
    to = [p for p in counters.peers if counters[p].bytes_sent]
    frm = [p for p in counters.peers if counters[p].bytes_received]
    comm.reset_counters()
    sent, received = counters.bytes_sent, counters.bytes_received
    return f"sent {sent} B to {ranks_text(to)}, received {received} B from {ranks_text(frm)}"


# %%
# 1. Broadcast
# ------------
#
# ``for i: recvbuf[i] = sendbuf[i] of root``. Two shapes move the buffer:
#
# - ring: a chain that starts at the root and follows the ring, ``root -> root+1 -> ... -> root-1``. Every rank
#   but the last forwards every chunk, so each sends the buffer once; the chain is ``n-1`` links long.
# - tree: a binary heap over the ranks, counted from the root: position ``p`` has children ``2p+1`` and
#   ``2p+2``. The chain is only about ``log2(n)`` links long, but an inner node sends the buffer to two children.
#
# Each rank prints, for each shape, whom it receives from and forwards to, and what its counters say it moved:
# with root 1, rank 1 sends 80 bytes (one buffer) on the ring but 160 bytes in the tree, where it has two
# children, and the last rank of the ring chain, rank 0, sends nothing.

ROOT = 1
print(f"1. broadcast of {COUNT} float32 from rank {ROOT}")
reference = rank_data(ROOT)
for algo in ("ring", "tree"):
    if algo == "ring":
        prev, nxt = (rank - 1) % n, (rank + 1) % n
        frm = [] if rank == ROOT else [prev]
        to = [] if nxt == ROOT else [nxt]
    else:
        tree = HeapTree(n, root=ROOT)
        parent = tree.parent(rank)
        frm, to = ([] if parent is None else [parent]), tree.children(rank)
    buf = nbcoll.to_device(rank_data(rank) if rank == ROOT else np.zeros(COUNT, np.float32))
    comm.broadcast(buf, root=ROOT, algo=algo)
    assert np.array_equal(nbcoll.to_host(buf), reference)
    print(f"   {algo}: receive from {ranks_text(frm)}, forward to {ranks_text(to)}; {traffic()}")
    print(f"   broadcast ({algo}) matches NumPy: ok")
print()

# %%
# 2. Reduce
# ---------
#
# ``for i: recvbuf[i] = op(sendbuf[i] of every rank)``, on the root only. The broadcast's shapes, run backwards:
# partial results flow towards the root, and each rank folds its own data into every chunk that passes through
# it (NCCL's ``recv_reduce_send``). The ring chain starts at ``root+1`` and ends at the root; in the tree, an
# inner node folds the chunks of both children with its own before sending one up.
#
# Only the root, rank 2, prints the first values of the result; the other ranks' receive buffers stay
# untouched, which they check, and they print only their traffic. In the tree the root receives 160 bytes, one
# buffer from each of its two children, and sends nothing.

ROOT = 2
print(f"2. reduce to rank {ROOT}")
inputs = [rank_data(r) for r in range(n)]
for algo in ("ring", "tree"):
    for op, expected in (("sum", np.sum(inputs, axis=0)), ("max", np.max(inputs, axis=0))):
        send = nbcoll.to_device(rank_data(rank))
        recv = nbcoll.zeros(COUNT, np.float32)
        comm.reduce(send, recv, op=op, root=ROOT, algo=algo)
        got = nbcoll.to_host(recv)
        if rank == ROOT:
            assert np.array_equal(got, expected), (algo, op, got)
            print(f"   {algo} {op}: {got[:4].tolist()} ... (rank r holds r*100 + i)")
        else:
            assert not got.any(), "reduce leaves recvbuf alone off the root"
        print(f"   reduce ({algo}, {op}): {traffic()}: ok")
print()

# %%
# 3. Scatter
# ----------
#
# ``for r, i: recvbuf[i] of rank r = sendbuf[r*count + i] of root``. The root holds one block per rank and sends
# each rank its own, one peer after the other (the "direct" algorithm): ``n-1`` messages from the root, none
# between the others. It keeps its own block with a local copy. Each rank prints the block it got, 6 values
# starting at ``6 * rank``; the root's counters show 72 bytes sent, 3 blocks of 24.

ROOT, BLOCK = 0, 6
print(f"3. scatter of {n} blocks of {BLOCK} from rank {ROOT}")
everything = np.arange(n * BLOCK, dtype=np.float32)
send = nbcoll.to_device(everything) if rank == ROOT else None  # only the root needs a send buffer
mine = nbcoll.zeros(BLOCK, np.float32)
comm.scatter(send, mine, root=ROOT)
assert np.array_equal(nbcoll.to_host(mine), everything[rank * BLOCK : (rank + 1) * BLOCK])
print(f"   my block: {nbcoll.to_host(mine).tolist()}; {traffic()}")
print("   scatter matches NumPy: ok")
print()

# %%
# 4. Gather
# ---------
#
# ``for r, i: recvbuf[r*count + i] of root = sendbuf[i] of rank r``: scatter backwards. Every rank sends its
# block to the root, rank 3, which alone prints what it holds, one line per block; the others print only their
# traffic, one block of 24 bytes sent to rank 3.

ROOT = 3
print(f"4. gather of one block of {BLOCK} per rank to rank {ROOT}")
block = nbcoll.to_device(rank_data(rank, BLOCK))
full = nbcoll.zeros(n * BLOCK, np.float32) if rank == ROOT else None  # only the root needs a receive buffer
comm.gather(block, full, root=ROOT)
if rank == ROOT:
    gathered = nbcoll.to_host(full)
    assert np.array_equal(gathered, np.concatenate([rank_data(r, BLOCK) for r in range(n)]))
    print(f"   rank {ROOT} holds (first 3 of each block):")
    for r, first in enumerate(gathered.reshape(n, BLOCK)[:, :3].tolist()):
        print(f"      from rank {r}: {first}")
print(f"   {traffic()}")
print("   gather matches NumPy: ok")
print()

comm.destroy()
print(f"Done: rank {rank} ok")
