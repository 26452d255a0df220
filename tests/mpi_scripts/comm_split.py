"""split (with NOCOLOR and keys), dup and shrink, each followed by a ring of messages on the new communicator.

Prints ``pid=...`` first and ``split ok`` last on every rank. For shrink, the last rank stops taking part: it
goes straight to a final barrier of MPI.COMM_WORLD while the others shrink it away and keep working.
"""

import os

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import NOCOLOR, init

print(f"pid={os.getpid()}", flush=True)
comm = init()
rank, size = comm.rank, comm.size


def check(condition, what):
    if not condition:
        raise AssertionError(f"rank {rank}: {what}")


def ring(c, tag):
    """Each rank sends its rank to the right and checks the value from the left; returns the received value."""
    if c.size == 1:
        return c.rank
    x = nbcoll.to_device(np.full(5, 100 * tag + c.rank, np.int64))
    y = nbcoll.zeros(5, np.int64)
    with c.group():
        c.send(x, (c.rank + 1) % c.size)
        c.recv(y, (c.rank - 1) % c.size)
    got = nbcoll.to_host(y)
    check(np.all(got == 100 * tag + (c.rank - 1) % c.size), f"ring {tag}: got {got}")
    return int(got[0])


ring(comm, 1)

# split by parity, ordered by descending rank; rank 0 asks for no communicator at all
color = NOCOLOR if rank == 0 else rank % 2
half = comm.split(color, key=-rank)
if rank == 0:
    check(half is None, "NOCOLOR must give None")
else:
    members = [r for r in range(1, size) if r % 2 == rank % 2]
    check(half.size == len(members), f"split size {half.size} != {len(members)}")
    check(half.rank == sorted(members, reverse=True).index(rank), f"split rank {half.rank}")
    # nodes are those of the parent, whichever ranks a child holds
    parent_nodes = comm.topology.node_of
    check(half.local_size == sum(parent_nodes[r] == comm.node for r in members), "split local_size")
    ring(half, 2)
    half.destroy()

# dup: the same ranks, its own connections and counters
twin = comm.dup()
check((twin.rank, twin.size, twin.node) == (rank, size, comm.node), "dup differs")
twin.reset_counters()
ring(twin, 3)
if size > 1:
    check(twin.counters.bytes_sent == 5 * 8, f"dup counters {twin.counters}")
twin.destroy()

# shrink: the last rank stops taking part; the others continue without it
if size > 1:
    gone = size - 1
    if rank != gone:
        survivors = comm.shrink([gone])
        check(survivors.size == size - 1 and survivors.rank == rank, "shrink ranks")
        ring(survivors, 4)
        survivors.destroy()
        print("shrink ok", flush=True)
comm.destroy()
MPI.COMM_WORLD.Barrier()
print("split ok", flush=True)
