"""Exercise block_reduce, mistake: the load leaves out the last element: each block sums its 32 elements by a
tree in shared memory::

for each block b: partials[b] = sum of x[32 b : 32 b + 32]
"""

import numpy as np
from numba import cuda

THREADS = 32


@cuda.jit
def block_sum_kernel(x, partials):
    # One thread loads one element (0 past the end), then half the threads add the other half's values, again
    # and again, until thread 0 holds the block's sum.
    shared = cuda.shared.array(THREADS, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    shared[t] = x[i] if i < x.size - 1 else 0.0
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if t < stride:
            shared[t] += shared[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = shared[0]
