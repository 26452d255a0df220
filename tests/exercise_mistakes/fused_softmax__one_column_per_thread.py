"""Exercise fused_softmax, mistake: each thread covers one column.

The task: one block per row, max, sum and output in one kernel::

for r, c: y[r, c] = exp(x[r, c] - max_r) / sum over c' of exp(x[r, c'] - max_r)
"""

import math

import numpy as np
from numba import cuda

THREADS = 16


@cuda.jit
def softmax_rows_kernel(x, y):
    # One block handles one row; thread t handles columns t, t + THREADS, ... Three passes over the row:
    # the max, the sum of exp(x - max), then the output; the block combines the threads' partials by a tree.
    scratch = cuda.shared.array(THREADS, np.float32)
    row, t = cuda.blockIdx.x, cuda.threadIdx.x
    if row >= x.shape[0]:
        return  # the whole block leaves: no thread waits at a syncthreads below
    cols = x.shape[1]

    best = -math.inf
    for c in range(t, min(t + 1, cols)):
        best = max(best, x[row, c])
    scratch[t] = best
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if t < stride:
            scratch[t] = max(scratch[t], scratch[t + stride])
        cuda.syncthreads()
        stride //= 2
    row_max = scratch[0]
    cuda.syncthreads()

    total = 0.0
    for c in range(t, min(t + 1, cols)):
        total += math.exp(x[row, c] - row_max)
    scratch[t] = total
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if t < stride:
            scratch[t] += scratch[t + stride]
        cuda.syncthreads()
        stride //= 2
    row_sum = scratch[0]

    for c in range(t, min(t + 1, cols)):
        y[row, c] = math.exp(x[row, c] - row_max) / row_sum
