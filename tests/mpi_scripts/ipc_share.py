"""Every rank gets one shared buffer through ipc_memory.share, writes its row with a kernel, and checks the others.

Arguments: the number of columns. Prints the rank's pid so the test can check that no segment was left behind.
"""

import os
import sys

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll import ipc_memory
from nbcoll.kernels import elementwise

comm = MPI.COMM_WORLD
columns = int(sys.argv[1])
print(f"pid {os.getpid()} backend {nbcoll.get_backend()}", flush=True)

buffer = ipc_memory.share(comm, (comm.size, columns), np.int32, tag="test")
assert not os.path.exists(os.path.join(ipc_memory.SHM_DIR, buffer.name)), "share() must unlink the name"

# Kernel writes into the shared memory, row `rank` = rank + 1 (negated twice: a kernel computes it).
source = nbcoll.to_device(np.full(columns, -(comm.rank + 1), dtype=np.int32))
elementwise.unary("neg", source, out=buffer.array[comm.rank])
nbcoll.synchronize()  # on a GPU the kernel may still run: finish it before the barrier tells the others to read
comm.Barrier()

seen = nbcoll.to_host(buffer.array)
expected = np.repeat(np.arange(1, comm.size + 1, dtype=np.int32)[:, None], columns, axis=1)
assert np.array_equal(seen, expected), f"rank {comm.rank} sees {seen}"
comm.Barrier()
buffer.close()
print(f"rank {comm.rank} ok", flush=True)
