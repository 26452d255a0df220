"""
Communicators: from an MPI hello world to nbcoll communicators, their topology, and splitting them
==================================================================================================

What you learn here:

- what MPI gives every process of a job (a rank, a size, a way to reach the others), and how nbcoll builds its
  own communicator on top of it, as ``ncclCommInitRank`` does once every rank has the same unique id;
- how a communicator sees the machine: which ranks share a node (``local_rank``, ``local_size``, ``node``) and
  which transport joins each pair of ranks (``ipc`` inside a node, ``mpi`` across nodes);
- how ``split`` makes sub-communicators (the building block of data, tensor and pipeline parallel groups),
  ``NOCOLOR`` leaves a rank out, and ``dup`` gives an independent copy.

Run it with ``python tutorials/05_communicators.py``: it re-launches itself on 4 ranks through ``mpiexec`` and
prints each rank's output in turn. ``NBCOLL_RANKS_PER_NODE=2`` pretends that the 4 ranks are 2 nodes of 2.
"""

# %%
# Set-up
# ------
#
# ``nbcoll.launch.relaunch(4)`` starts this same script again under ``mpiexec`` on 4 ranks and waits for them;
# inside those 4 processes it returns at once, and everything after it runs on every rank. Every rank prints its
# own lines, so read the output one rank at a time (run as a script, each rank's output comes as one block,
# headed ``[rank N]``). ``NBCOLL_RANKS_PER_NODE=2`` (the default here) makes the 4 ranks pretend to be 2 nodes
# of 2 ranks each.

import os

import nbcoll.launch

nbcoll.launch.relaunch(4, env={"NBCOLL_RANKS_PER_NODE": os.environ.get("NBCOLL_RANKS_PER_NODE", "2")})

# Everything below runs on each of the 4 ranks.
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll.comm import NOCOLOR, init  # noqa: E402

world = MPI.COMM_WORLD

# %%
# 1. MPI hello world
# ------------------
#
# ``mpiexec`` started 4 copies of this script. MPI numbers them 0..3 (the rank) and tells each how many there
# are; every rank prints its own hello.

print(f"1. MPI hello world: I am rank {world.rank} of {world.size}, on host {MPI.Get_processor_name()}")

# %%
# 2. An nbcoll communicator
# -------------------------
#
# ``init()`` is collective: every rank calls it. It duplicates the MPI communicator (so nbcoll's messages never
# meet yours), finds which ranks share a node, maps a control page of shared memory per node, and connects every
# pair of ranks on one node with a FIFO in shared memory (tutorial 06 looks inside).
#
# Each rank then prints where it sits, its node and its place in the node, and which transport reaches each of
# its peers: ``ipc`` (shared memory) for the other rank of its node, ``mpi`` for the ranks of the other node.
# Rank 0 alone also explains why one machine shows two nodes.

comm = init()
print(
    f"2. communicator: rank {comm.rank} of {comm.size}, node {comm.node} of {comm.nnodes}, "
    f"local rank {comm.local_rank} of {comm.local_size}"
)
per_node = os.environ.get("NBCOLL_RANKS_PER_NODE")
if comm.rank == 0 and per_node:
    print(f"   (one machine, yet {comm.nnodes} nodes: NBCOLL_RANKS_PER_NODE={per_node} pretends that every {per_node}")
    print("   ranks form a node, so that both transports, ipc and mpi, run here)")
for peer in range(comm.size):
    if peer != comm.rank:
        print(f"   to reach rank {peer} I use {comm.transport_to(peer)}")

# %%
# A first message round the ring
# ------------------------------
#
# Each rank sends its rank number to the right and receives from the left. Inside ``comm.group()`` the send and
# the receive run together, so the ring cannot deadlock, as it could if every rank first waited for its send to
# finish. Each rank prints what its left neighbour sent it: rank 0 hears from rank 3.

right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
mine = nbcoll.to_device(np.array([comm.rank], dtype=np.int64))
theirs = nbcoll.zeros(1, np.int64)
with comm.group():
    comm.send(mine, right)
    comm.recv(theirs, left)
print(f"   ring: rank {left} sent me {int(nbcoll.to_host(theirs)[0])}")

# %%
# 3. Splitting into sub-groups
# ----------------------------
#
# ``split(color, key)`` is collective too: ranks with the same color form a new communicator, ordered by key.
# Here the even ranks form one group and the odd ranks another, as data-parallel replicas of a 2-way model would.
# Look at the new rank numbers: world ranks 2 and 3 are each rank 1 of their half, and a ring inside a half
# joins world ranks 0 and 2, or 1 and 3.

half = comm.split(color=comm.rank % 2, key=comm.rank)
print(f"3. split by parity: world rank {comm.rank} is rank {half.rank} of {half.size} in group {comm.rank % 2}")
total = nbcoll.zeros(1, np.int64)
if half.size > 1:
    with half.group():
        half.send(mine, (half.rank + 1) % half.size)
        half.recv(total, (half.rank - 1) % half.size)
    print(f"   my neighbour in the group is world rank {int(nbcoll.to_host(total)[0])}")

# %%
# Leaving a rank out, and duplicating
# -----------------------------------
#
# ``NOCOLOR`` leaves a rank out: it gets ``None``, and the others a communicator of 3 ranks without it. ``dup()``
# gives the same ranks a communicator of their own, with separate connections and separate counters: it has sent
# nothing yet, whatever ``comm`` sent. At the end each rank destroys every communicator it holds.

firsts = comm.split(color=NOCOLOR if comm.rank == 0 else 0)
print(f"   without rank 0: {'None (left out)' if firsts is None else f'rank {firsts.rank} of {firsts.size}'}")

twin = comm.dup()
print(f"   dup: rank {twin.rank} of {twin.size}; bytes it has sent so far: {twin.counters.bytes_sent}")

for c in (twin, firsts, half, comm):
    if c is not None:
        c.destroy()
print("Done: every rank built, split and destroyed its communicators.")
