"""Exercise scatter_add, reference solution: ``for i: out[index[i]] += src[i]``, one thread per source element."""

from numba import cuda


@cuda.jit
def scatter_add_kernel(index, src, out):
    # One thread adds one source element. Several threads may add into the same slot, so the read-add-write
    # is one atomic operation: otherwise two of them read the same old value and one sum is lost.
    i = cuda.grid(1)
    if i < src.size:
        cuda.atomic.add(out, index[i], src[i])
