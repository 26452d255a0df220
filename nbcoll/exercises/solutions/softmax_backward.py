"""Exercise softmax_backward, reference solution: ``dx`` from ``y = softmax(x)`` and ``dy``, along the last axis.

``dy_j / dx_i = y_j (delta_ij - y_i)``, so ``dx_i = sum_j dy_j y_j (delta_ij - y_i) = y_i (dy_i - sum_j dy_j y_j)``.
"""

import numpy as np


def softmax_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))
