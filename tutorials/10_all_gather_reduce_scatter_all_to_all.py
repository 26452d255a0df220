"""
All-gather, reduce-scatter and all-to-all: the collectives that give every rank one block per rank
==================================================================================================

What you learn here:

- all-gather (everyone gets everyone's block) and reduce-scatter (everyone gets the reduction of one block),
  with the ring and, for all-gather, the direct algorithm; and their in-place forms;
- that an all-reduce *is* a reduce-scatter followed by an all-gather: the same result and, byte for byte, the
  same traffic. This is the ring all-reduce of tutorial 08 cut in two, and the reason ZeRO and FSDP can split it
  around the optimizer step;
- all-to-all, the transpose of a matrix whose rows live on different ranks (expert parallelism, and the
  exchange between sequence and head sharding), done by pairwise exchange.

Run it with ``python tutorials/10_all_gather_reduce_scatter_all_to_all.py``: it re-launches itself on 4 ranks.
"""

# %%
# Set-up
# ------
#
# ``relaunch(4)`` runs this script again on 4 ranks; everything after it runs on each of them. Every rank runs
# every collective, checks its own result and prints it. The FIFO is tiny
# (``NBCOLL_BUFFSIZE=256``: 8 slots of 32 bytes, 8 int32 each), so a block of 10 int32 travels as 2 chunks.
# ``block_of(r)`` is rank ``r``'s block, ``r*100 + i``, and ``bytes_sent_since_reset()`` reads this rank's byte
# counter and resets it for the next collective.

import os

import nbcoll.launch

nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import numpy as np  # noqa: E402

# A FIFO of 8 slots of 32 bytes (8 int32): the blocks below span more than one chunk. Read at init().
os.environ.setdefault("NBCOLL_BUFFSIZE", "256")

import nbcoll  # noqa: E402
from nbcoll.comm import init  # noqa: E402

comm = init()
rank, n = comm.rank, comm.size
BLOCK = 10  # int32 elements per rank's block: two chunks of 8 and 2
print(f"Tutorial 10 on the {nbcoll.get_backend()!r} backend: rank {rank} of {n}, blocks of {BLOCK} int32")
print()


def block_of(r: int) -> np.ndarray:
    """Rank r's block: r*100 + 0, 1, 2, ... (every rank can rebuild every other rank's)."""
    return (r * 100 + np.arange(BLOCK)).astype(np.int32)


def bytes_sent_since_reset() -> int:
    sent = comm.counters.bytes_sent
    comm.reset_counters()
    return sent


# %%
# 1. All-gather
# -------------
#
# ``for r, i: recvbuf[r*count + i] = sendbuf[i] of rank r``, on every rank. Two algorithms:
#
# - ring: each block travels round the ring; at each of the ``n-1`` steps a rank forwards the block it received
#   last, so every link carries one block per step.
# - direct: each rank sends its block to every peer at once; fewer steps, the same bytes.
#
# Each rank prints its own block, then what each algorithm made it send: 120 bytes both ways, 3 blocks of 40.
# The in-place form passes this rank's block of the output as the input; the line shows the first element of
# each of the 4 gathered blocks, the same on every rank.

print("1. all-gather")
print(f"   my block: {block_of(rank).tolist()}")
expected = np.concatenate([block_of(r) for r in range(n)])
for algo in ("ring", "direct"):
    full = nbcoll.zeros(n * BLOCK, np.int32)
    comm.all_gather(nbcoll.to_device(block_of(rank)), full, algo=algo)
    assert np.array_equal(nbcoll.to_host(full), expected)
    print(f"   {algo}: sent {bytes_sent_since_reset()} B (n-1 blocks of {4 * BLOCK} B): ok")
# In place: the input is this rank's own block of the output, so nothing is copied first.
full = nbcoll.to_device(np.where(np.arange(n * BLOCK) // BLOCK == rank, expected, 0).astype(np.int32))
comm.all_gather(full[rank * BLOCK : (rank + 1) * BLOCK], full)
assert np.array_equal(nbcoll.to_host(full), expected)
print(f"   in place (sendbuf = my block of recvbuf): {nbcoll.to_host(full)[::BLOCK].tolist()} ...: ok")
bytes_sent_since_reset()
print()

# %%
# 2. Reduce-scatter
# -----------------
#
# ``for i: recvbuf[i] = sum over ranks p of sendbuf[rank*count + i] of rank p``. Every rank holds a full buffer of
# ``n`` blocks; each ends with one block, reduced over all ranks. On the ring, block ``r`` starts at rank
# ``r+1``, collects every rank's part on its way round and ends, complete, at rank ``r``.
#
# Each rank prints the first element of each of its ``n`` input blocks, then the first values of the one block
# it ends with: on rank ``r``, block ``r`` summed over the 4 ranks. It also sends 120 bytes, as all-gather did.

print("2. reduce-scatter")
inputs = [np.concatenate([block_of(r) + 1000 * b for b in range(n)]) for r in range(n)]  # rank r's n blocks
print(f"   my {n} blocks start with {inputs[rank][::BLOCK].tolist()} (block b is my block + 1000 b)")
mine = nbcoll.zeros(BLOCK, np.int32)
comm.reduce_scatter(nbcoll.to_device(inputs[rank]), mine, op="sum")
expected_block = np.sum(inputs, axis=0)[rank * BLOCK : (rank + 1) * BLOCK]
assert np.array_equal(nbcoll.to_host(mine), expected_block)
print(f"   my block, summed over {n} ranks: {nbcoll.to_host(mine)[:4].tolist()} ...")
print(f"   sent {bytes_sent_since_reset()} B (n-1 blocks of {4 * BLOCK} B): ok")
print()

# %%
# 3. All-reduce = reduce-scatter + all-gather
# -------------------------------------------
#
# Reduce-scatter leaves each rank one reduced block; all-gather hands every rank every reduced block: the
# all-reduce. The ring all-reduce is exactly these two halves run back to back, and when the buffer is ``n``
# whole rounds it sends exactly the same bytes: ``2(n-1)/n`` of the buffer per rank.
#
# Every rank computes both ways and checks that the results and the byte counts agree; the figures are the
# same on every rank, so rank 0 alone prints them and the others print one line saying their check passed.

print("3. all-reduce = reduce-scatter + all-gather")
grads = nbcoll.to_device(inputs[rank])
total = nbcoll.zeros(n * BLOCK, np.int32)
comm.all_reduce(grads, total, algo="ring")
sent_all_reduce = bytes_sent_since_reset()

shard = nbcoll.zeros(BLOCK, np.int32)
comm.reduce_scatter(grads, shard)
sent_reduce_scatter = bytes_sent_since_reset()
rebuilt = nbcoll.zeros(n * BLOCK, np.int32)
comm.all_gather(shard, rebuilt)
sent_all_gather = bytes_sent_since_reset()

assert np.array_equal(nbcoll.to_host(rebuilt), nbcoll.to_host(total))
assert np.array_equal(nbcoll.to_host(total), np.sum(inputs, axis=0))
buffer_bytes = 4 * n * BLOCK
# n blocks of BLOCK elements are ceil(BLOCK / chunk) whole rounds of the ring, so the two counts agree exactly.
assert sent_all_reduce == sent_reduce_scatter + sent_all_gather == 2 * (n - 1) * buffer_bytes // n
if rank == 0:  # every rank computed and checked the same figures: one copy of them is enough to read
    print(f"   the same {n * BLOCK} sums either way: ok")
    print(f"   all-reduce (ring):          sent {sent_all_reduce} B")
    print(
        f"   reduce-scatter + all-gather: sent {sent_reduce_scatter} + {sent_all_gather} = "
        f"{sent_reduce_scatter + sent_all_gather} B"
    )
    print(f"   2(n-1)/n x {buffer_bytes} B buffer = {2 * (n - 1) * buffer_bytes // n} B")
    print("   the traffic is the same, byte for byte: ok")
else:
    print("   the same sums and the same traffic as rank 0 shows: ok")
print()

# %%
# 4. All-to-all
# -------------
#
# ``for p, i: recvbuf[p*count + i] = sendbuf[rank*count + i] of rank p``. Block ``p`` of rank ``r`` goes to rank
# ``p``, and lands in its slot ``r``: the transpose of the ``n x n`` matrix of blocks whose row ``r`` lives on
# rank ``r``. Nothing is reduced or forwarded, so the only question is the order: at step ``s`` rank ``r`` sends
# to ``r+s`` and receives from ``r-s``, so that every rank sends one message and receives one at each step.
#
# The blocks are 3 elements of ``10*r + p``, so each value names its sender and its receiver. Each rank prints
# the row it sends and the column it receives: on rank 1, ``[1, 11, 21, 31]``, one block from each rank.

print("4. all-to-all: the element 10*r + p means 'from rank r, for rank p'")
SMALL = 3
outgoing = np.repeat(10 * rank + np.arange(n), SMALL).astype(np.int32)
incoming = nbcoll.zeros(n * SMALL, np.int32)
comm.all_to_all(nbcoll.to_device(outgoing), incoming, algo="pairwise")  # the order above; "direct" reads in place
received = nbcoll.to_host(incoming)
assert np.array_equal(received, np.repeat(10 * np.arange(n) + rank, SMALL))
print(f"   I send    {outgoing[::SMALL].tolist()} (first element of each block)")
print(f"   I receive {received[::SMALL].tolist()}: my column of the matrix: ok")
print()

if rank == 0:
    print("Try it yourself: python -m nbcoll exercise batched_copy (the copy that packs buffers)")
comm.destroy()
print(f"Done: rank {rank} ok")
