"""Exercise matmul_backward, mistake: no transposes: the gradients of ``out = a @ b``.

``out[i, j] = sum over p of a[i, p] * b[p, j]``, so ``d out[i, j] / d a[i, p] = b[p, j]``: each ``a[i, p]``
collects ``grad_out[i, j] * b[p, j]`` over j, which is ``grad_out @ b.T``; likewise ``grad_b = a.T @ grad_out``.
"""

import numpy as np


def matmul_backward(a: np.ndarray, b: np.ndarray, grad_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return grad_out @ b, a @ grad_out
