"""Communicators: from an MPI hello world to nbcoll communicators, their topology, and splitting them.

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

import os

import nbcoll.launch

nbcoll.launch.relaunch(4, env={"NBCOLL_RANKS_PER_NODE": os.environ.get("NBCOLL_RANKS_PER_NODE", "2")})

# Everything below runs on each of the 4 ranks.
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll.comm import NOCOLOR, init  # noqa: E402

world = MPI.COMM_WORLD

# ---------------------------------------------------------------------------------------------------------------
# 1. MPI hello world.
#
# mpiexec started 4 copies of this script. MPI numbers them 0..3 (the rank) and tells each how many there are.
print(f"1. MPI hello world: I am rank {world.rank} of {world.size}, on host {MPI.Get_processor_name()}")

# ---------------------------------------------------------------------------------------------------------------
# 2. An nbcoll communicator.
#
# init() is collective: every rank calls it. It duplicates the MPI communicator (so nbcoll's messages never meet
# yours), finds which ranks share a node, maps a control page of shared memory per node, and connects every pair
# of ranks on one node with a FIFO in shared memory (tutorial 06 looks inside).
comm = init()
per_node = os.environ.get("NBCOLL_RANKS_PER_NODE")
if comm.rank == 0 and per_node:
    print(
        f"   (one machine, yet {comm.nnodes} nodes: NBCOLL_RANKS_PER_NODE={per_node} pretends that every {per_node} "
        "ranks form a node, so that both transports, ipc and mpi, run here)"
    )
print(
    f"2. communicator: rank {comm.rank} of {comm.size}, node {comm.node} of {comm.nnodes}, "
    f"local rank {comm.local_rank} of {comm.local_size}"
)
for peer in range(comm.size):
    if peer != comm.rank:
        print(f"   to reach rank {peer} I use {comm.transport_to(peer)}")

# A first message around the ring: each rank sends its rank to the right and receives from the left. Inside a
# group, both run together, so the ring cannot deadlock.
right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
mine = nbcoll.to_device(np.array([comm.rank], dtype=np.int64))
theirs = nbcoll.zeros(1, np.int64)
with comm.group():
    comm.send(mine, right)
    comm.recv(theirs, left)
print(f"   ring: rank {left} sent me {int(nbcoll.to_host(theirs)[0])}")

# ---------------------------------------------------------------------------------------------------------------
# 3. Splitting into sub-groups.
#
# split(color, key) is collective too: ranks with the same color form a new communicator, ordered by key. Here
# the even ranks form one group and the odd ranks another, as data-parallel replicas of a 2-way model would.
half = comm.split(color=comm.rank % 2, key=comm.rank)
print(f"3. split by parity: world rank {comm.rank} is rank {half.rank} of {half.size} in group {comm.rank % 2}")
total = nbcoll.zeros(1, np.int64)
if half.size > 1:
    with half.group():
        half.send(mine, (half.rank + 1) % half.size)
        half.recv(total, (half.rank - 1) % half.size)
    print(f"   my neighbour in the group is world rank {int(nbcoll.to_host(total)[0])}")

# NOCOLOR leaves a rank out: it gets None, and the others a communicator without it.
firsts = comm.split(color=NOCOLOR if comm.rank == 0 else 0)
print(f"   without rank 0: {'None (left out)' if firsts is None else f'rank {firsts.rank} of {firsts.size}'}")

# dup() gives the same ranks a communicator of their own: separate connections, separate counters.
twin = comm.dup()
print(f"   dup: rank {twin.rank} of {twin.size}; bytes it has sent so far: {twin.counters.bytes_sent}")

for c in (twin, firsts, half, comm):
    if c is not None:
        c.destroy()
print("Done: every rank built, split and destroyed its communicators.")
