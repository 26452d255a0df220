"""Collectives across pretend nodes: exact results, and every MPI receive side kept ``NBCOLL_STEPS`` deep.

Run under mpiexec with ``NBCOLL_RANKS_PER_NODE`` set (1: every pair talks over MPI; 2: ipc inside a pair of
ranks, MPI between pairs) and a small ``NBCOLL_BUFFSIZE``, so that every message is many chunks. Integer inputs
make every result exact, whatever the order of the fold. Prints ``pid=...`` first and ``pipeline ok`` last.
"""

import os

import numpy as np

import nbcoll
from nbcoll.comm import init
from nbcoll.comm.algorithms import ALGORITHMS

print(f"pid={os.getpid()}", flush=True)
comm = init()
rank, n = comm.rank, comm.size
steps = comm.config.steps
per_chunk = comm.config.chunk_bytes // 8
COUNTS = [0, 1, per_chunk - 1, 5 * per_chunk + 3, 3 * steps * per_chunk + 7]  # empty, one chunk, many FIFOs


def check(condition, what):
    if not condition:
        raise AssertionError(f"rank {rank}: {what}")


def data(r, count):
    return np.arange(count, dtype=np.int64) * (r + 1) + 1000 * r


def run_case(collective, algo, count):
    host = nbcoll.to_host
    if collective == "all_reduce":
        out = nbcoll.to_device(np.zeros(count, np.int64))
        comm.all_reduce(nbcoll.to_device(data(rank, count)), out, algo=algo)
        want = sum(data(r, count) for r in range(n))
    elif collective == "all_gather":
        out = nbcoll.to_device(np.zeros(count * n, np.int64))
        comm.all_gather(nbcoll.to_device(data(rank, count)), out, algo=algo)
        want = np.concatenate([data(r, count) for r in range(n)])
    elif collective == "reduce_scatter":
        out = nbcoll.to_device(np.zeros(count, np.int64))
        comm.reduce_scatter(nbcoll.to_device(data(rank, count * n)), out, algo=algo)
        want = sum(data(r, count * n) for r in range(n))[rank * count : (rank + 1) * count]
    elif collective == "broadcast":
        root = n - 1
        out = nbcoll.to_device(data(root, count) if rank == root else np.zeros(count, np.int64))
        comm.broadcast(out, out, root=root, algo=algo)
        want = data(root, count)
    else:  # all_to_all: block j of rank r goes to rank j
        out = nbcoll.to_device(np.zeros(count * n, np.int64))
        comm.all_to_all(nbcoll.to_device(data(rank, count * n)), out, algo=algo)
        want = np.concatenate([data(r, count * n)[rank * count : (rank + 1) * count] for r in range(n)])
    check(np.array_equal(host(out), want), f"{collective} {algo} of {count} elements differs")


cases = 0
for collective in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"):
    for algo in ALGORITHMS[collective]:
        for count in COUNTS:
            run_case(collective, algo, count)
            cases += 1

mpi_peers = [p for p in range(n) if p != rank and comm.transport_to(p) == "mpi"]
for peer in mpi_peers:
    recv, send = comm.recv_connection(peer), comm.send_connection(peer)
    check(recv.most_posted == steps, f"at most {recv.most_posted} receives from {peer} posted at once, not {steps}")
    check(send.most_in_flight == steps, f"at most {send.most_in_flight} sends to {peer} in flight, not {steps}")
print(f"rank {rank}: {cases} cases exact; {len(mpi_peers)} mpi peers kept {steps} receives posted", flush=True)
comm.destroy()
print("pipeline ok", flush=True)
