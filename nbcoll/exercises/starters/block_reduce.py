"""Exercise block_reduce: a shared-memory tree reduction, one partial sum per block::

    for each block b: partials[b] = sum of x[32 b : 32 b + 32]

The check launches ``block_sum_kernel[blocks, 32](x, partials)`` with ``blocks = ceil(n / 32)`` (at least one)
and compares each partial with NumPy, for n = 1, 45, 100 and 0 (an empty block's sum is 0). Check your work with::

    python -m nbcoll exercise block_reduce --check block_reduce.py
"""

import numpy as np  # noqa: F401 - np.float32, for the shared arrays
from numba import cuda

THREADS = 32


@cuda.jit
def block_sum_kernel(x, partials):
    # Plan, for one thread t of block b:
    #   1. shared = cuda.shared.array(THREADS, np.float32); load shared[t] = x[b * THREADS + t], or 0.0 past the end
    #   2. cuda.syncthreads(): every load must land before anyone reads a neighbour's slot
    #   3. stride = THREADS // 2, 8, ... 1: threads t < stride add shared[t + stride] into shared[t]; then
    #      cuda.syncthreads() again, so the next step reads finished sums
    #   4. thread 0 writes partials[b] = shared[0]
    pass
