"""Exercise map_kernel, mistake: the bound check leaves out the last element: ``for i: out[i] = a * x[i] + b``."""

from numba import cuda


@cuda.jit
def axpb_kernel(x, out, a, b):
    # One thread computes one element; the threads past the end do nothing, but the bound is one too small.
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < out.size - 1:
        out[i] = a * x[i] + b
