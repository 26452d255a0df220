"""Exercise matmul_backward: the gradients of ``out = a @ b`` (``a`` is m x k, ``b`` is k x n).

Given ``grad_out = dL/d out`` (m x n), return ``(grad_a, grad_b)``, with the shapes of ``a`` and ``b``::

    out[i, j] = sum over p of a[i, p] * b[p, j]
    grad_a[i, p] = sum over j of grad_out[i, j] * (d out[i, j] / d a[i, p])
    grad_b[p, j] = sum over i of grad_out[i, j] * (d out[i, j] / d b[p, j])

This is what ``nbcoll.tensors.ops.matmul`` does in its backward. Check your work with::

    python -m nbcoll exercise matmul_backward --check matmul_backward.py
"""

import numpy as np


def matmul_backward(a: np.ndarray, b: np.ndarray, grad_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Plan:
    #   1. d out[i, j] / d a[i, p] is b[p, j]: write grad_a as a sum over j, and recognise a matmul with b.T
    #   2. d out[i, j] / d b[p, j] is a[i, p]: write grad_b as a sum over i, and recognise a matmul with a.T
    #   3. check the shapes: grad_a is m x k, grad_b is k x n
    raise NotImplementedError("matmul_backward: write grad_a and grad_b")
