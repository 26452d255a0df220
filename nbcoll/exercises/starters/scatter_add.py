"""Exercise scatter_add: ``for i: out[index[i]] += src[i]``, one thread per source element.

This is the backward of a gather (and of an embedding lookup): many source elements may land in one slot.
The check launches ``scatter_add_kernel[ceil(m / 32), 32](index, src, out)`` (at least one block) with 5 slots
in ``out`` and m = 1, 33, 70, 0 source elements, so slots collide. Check your work with::

    python -m nbcoll exercise scatter_add --check scatter_add.py
"""

from numba import cuda


@cuda.jit
def scatter_add_kernel(index, src, out):
    # Plan, for one thread:
    #   1. i = cuda.grid(1); only i < src.size does work
    #   2. add src[i] into out[index[i]]; other threads may add into the same slot at the same moment, so a
    #      plain out[j] += v can lose a sum: use cuda.atomic.add(array, position, value)
    pass
