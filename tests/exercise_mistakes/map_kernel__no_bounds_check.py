"""Exercise map_kernel, mistake: no bounds check: ``for i: out[i] = a * x[i] + b``, one thread per element."""

from numba import cuda


@cuda.jit
def axpb_kernel(x, out, a, b):
    # One thread computes one element. The grid is rounded up to whole blocks, so the threads past the end
    # must do nothing.
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    out[i] = a * x[i] + b
