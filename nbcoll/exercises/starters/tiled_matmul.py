"""Exercise tiled_matmul: ``for i, j: out[i, j] = sum over p of a[i, p] * b[p, j]``, through shared-memory tiles.

Each block computes a TILE x TILE tile of ``out`` and walks along k one tile at a time: the block loads a tile
of ``a`` and a tile of ``b`` into shared memory, then every thread reads its row of one and column of the other
from there. The check launches ``matmul_tiled_kernel[(ceil(n / 4), ceil(m / 4)), (4, 4)](a, b, out)`` (at least
one block each way) on shapes whose sides are not multiples of TILE, and an empty one. Check your work with::

    python -m nbcoll exercise tiled_matmul --check tiled_matmul.py
"""

import numpy as np  # noqa: F401 - np.float32, for the shared arrays
from numba import cuda

TILE = 4


@cuda.jit
def matmul_tiled_kernel(a, b, out):
    # Plan, for the thread (tx, ty) = threadIdx of block (bx, by):
    #   1. it owns out[row, col] with row = by * TILE + ty, col = bx * TILE + tx
    #   2. two shared arrays a_tile, b_tile of (TILE, TILE) float32
    #   3. for each of the (k + TILE - 1) // TILE tiles along k, starting at p = t * TILE:
    #        a_tile[ty, tx] = a[row, p + tx] and b_tile[ty, tx] = b[p + ty, col], or 0.0 past an edge
    #        cuda.syncthreads()                       (the tiles are complete)
    #        acc += a_tile[ty, q] * b_tile[q, tx] for q < TILE
    #        cuda.syncthreads()                       (nobody still reads before the next load)
    #   4. if row < m and col < n: out[row, col] = acc
    pass
