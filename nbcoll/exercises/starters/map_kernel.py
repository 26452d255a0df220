"""Exercise map_kernel: your first kernel, ``for i: out[i] = a * x[i] + b``, one thread per element.

The check launches ``axpb_kernel[blocks, 32](x, out, a, b)`` with ``blocks = ceil(n / 32)`` (at least one) on
float32 arrays of n = 1, 33, 70 and 0 elements, and compares ``out`` with NumPy. Check your work with::

    python -m nbcoll exercise map_kernel --check map_kernel.py
"""

from numba import cuda


@cuda.jit
def axpb_kernel(x, out, a, b):
    # Plan, for one thread:
    #   1. its global index: i = blockIdx.x * blockDim.x + threadIdx.x (cuda.grid(1) computes the same)
    #   2. the grid has whole blocks, so it may have more threads than elements: only i < out.size does work
    #   3. out[i] = a * x[i] + b
    pass
