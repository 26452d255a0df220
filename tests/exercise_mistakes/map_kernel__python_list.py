"""map_kernel with code that only the simulator runs: a Python list inside the kernel."""

from numba import cuda


@cuda.jit
def axpb_kernel(x, out, a, b):
    i = cuda.grid(1)
    if i < out.size:
        coefficients = [a, b]
        out[i] = coefficients[0] * x[i] + coefficients[1]
