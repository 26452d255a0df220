"""Ranks that keep running collectives of every kind until they are killed, for the ``/dev/shm`` lifetime tests.

``mpiexec -n 3 python shm_lifetime.py``: each rank first sets up everything that maps shared memory (the
FIFOs and control page of ``init``, a dup and a split, the direct windows, the LL buffers, a registered buffer),
then writes its pid to ``READY_DIR/rank<r>`` with the names it still has in ``/dev/shm`` (there should be none),
and runs collectives in a loop, checking each result, until the test kills it.
"""

from __future__ import annotations

import glob
import os

import numpy as np

import nbcoll
from nbcoll.comm import init

comm = init()
n, r = comm.size, comm.rank
dup, half = comm.dup(), comm.split(color=r % 2, key=r)
large = nbcoll.to_device(np.zeros(100_003, np.float32))  # several FIFO chunks, odd length
small = nbcoll.to_device(np.zeros(7, np.float32))
registered = comm.alloc(4099, np.float32)
gathered = nbcoll.zeros(5 * n, np.int64)
expected_sum = n * (n - 1) / 2


def one_round(i: int) -> None:
    for c, algo in ((comm, "ring"), (comm, "tree"), (dup, "direct"), (comm, None)):
        large[:] = r + i
        c.all_reduce(large, algo=algo)
        assert np.all(nbcoll.to_host(large) == expected_sum + n * i), (algo, i)
    small[:] = r
    dup.all_reduce(small)  # small enough for LL inside a node
    assert np.all(nbcoll.to_host(small) == expected_sum)
    registered[:] = r
    comm.all_reduce(registered, algo="direct")
    assert np.all(nbcoll.to_host(registered) == expected_sum)
    comm.all_gather(nbcoll.to_device(np.full(5, r, np.int64)), gathered)
    assert np.array_equal(nbcoll.to_host(gathered), np.repeat(np.arange(n), 5))
    half.all_reduce(small)


for i in range(2):
    one_round(i)
comm.barrier()
left = sorted(os.path.basename(p) for p in glob.glob(f"/dev/shm/nbcoll_{os.getpid()}_*"))
with open(os.path.join(os.environ["READY_DIR"], f"rank{r}"), "w") as ready:
    ready.write(f"{os.getpid()} {' '.join(left)}")
i = 2
while True:  # until killed: always in the middle of one collective or another
    one_round(i % 1000)
    i += 1
