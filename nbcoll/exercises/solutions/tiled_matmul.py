"""Exercise tiled_matmul, reference solution: ``for i, j: out[i, j] = sum over p of a[i, p] * b[p, j]``.

Each block computes a TILE x TILE tile of ``out``, walking along k one tile at a time: the block loads a tile of
``a`` and one of ``b`` into shared memory, every thread reads TILE values of each from there, and each value
of ``a`` and ``b`` leaves global memory once per block instead of once per thread.
"""

import numpy as np
from numba import cuda

TILE = 4


@cuda.jit
def matmul_tiled_kernel(a, b, out):
    # One thread computes out[row, col]; with its block it loads one element of each tile (0 past the edge).
    a_tile = cuda.shared.array((TILE, TILE), np.float32)
    b_tile = cuda.shared.array((TILE, TILE), np.float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col = cuda.blockIdx.x * TILE + tx
    row = cuda.blockIdx.y * TILE + ty
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    acc = 0.0
    for t in range((k + TILE - 1) // TILE):
        p = t * TILE
        a_tile[ty, tx] = a[row, p + tx] if row < m and p + tx < k else 0.0
        b_tile[ty, tx] = b[p + ty, col] if p + ty < k and col < n else 0.0
        cuda.syncthreads()
        for q in range(TILE):
            acc += a_tile[ty, q] * b_tile[q, tx]
        cuda.syncthreads()
    if row < m and col < n:
        out[row, col] = acc
