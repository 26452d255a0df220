"""Exercise fused_softmax: a row softmax in one kernel, one block per row::

    for r, c: y[r, c] = exp(x[r, c] - max_r) / sum over c' of exp(x[r, c'] - max_r)

Subtracting the row's maximum changes nothing mathematically and keeps exp from overflowing. The check launches
``softmax_rows_kernel[rows, 16](x, y)`` (at least one block) on rows of 1, 5, 37 and 6 columns, one case with
values near 1000, and an empty one. Check your work with::

    python -m nbcoll exercise fused_softmax --check fused_softmax.py
"""

import math  # noqa: F401 - math.exp and math.inf work in kernels

import numpy as np  # noqa: F401
from numba import cuda

THREADS = 16


@cuda.jit
def softmax_rows_kernel(x, y):
    # Plan, for thread t of block r (the row):
    #   0. if r >= x.shape[0] the whole block returns (the launch has at least one block)
    #   1. each thread's max over columns t, t + THREADS, ...; the block's max by a tree in a shared array
    #      of THREADS float32, with cuda.syncthreads() between steps; everyone reads the result
    #   2. the same for the sum of exp(x[r, c] - max) (a syncthreads before reusing the shared array)
    #   3. each thread writes y[r, c] = exp(x[r, c] - max) / sum for its columns
    pass
