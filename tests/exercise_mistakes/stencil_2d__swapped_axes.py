"""Exercise stencil_2d, mistake: row and column swapped.

The task: a 2-D "valid" stencil (correlation), one thread per output element::

for r, c: out[r, c] = sum over a < KH, b < KW of x[r + a, c + b] * w[a, b]
"""

from numba import cuda


@cuda.jit
def conv2d_kernel(x, w, out):
    # One thread computes one output element; x (the first index of cuda.grid(2)) runs along columns.
    r, c = cuda.grid(2)
    if r < out.shape[0] and c < out.shape[1]:
        acc = 0.0
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                acc += x[r + a, c + b] * w[a, b]
        out[r, c] = acc
