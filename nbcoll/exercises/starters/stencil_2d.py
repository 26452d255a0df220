"""Exercise stencil_2d: a 2-D stencil, one thread per output element::

    for r, c: out[r, c] = sum over a < KH, b < KW of x[r + a, c + b] * w[a, b]

``out`` has shape ``(rows - KH + 1, cols - KW + 1)`` (the "valid" part, no padding; it may be empty). The check
launches ``conv2d_kernel[(ceil(out_cols / 8), ceil(out_rows / 8)), (8, 8)](x, w, out)``: blockIdx.x and
threadIdx.x run along columns, y along rows. Check your work with::

    python -m nbcoll exercise stencil_2d --check stencil_2d.py
"""

from numba import cuda


@cuda.jit
def conv2d_kernel(x, w, out):
    # Plan, for one thread:
    #   1. its output element: c, r = cuda.grid(2) (x first: the column, then y: the row)
    #   2. only threads with r < out.shape[0] and c < out.shape[1] do work (the last blocks stick out)
    #   3. acc = sum of x[r + a, c + b] * w[a, b] over a < w.shape[0], b < w.shape[1]; then out[r, c] = acc
    pass
