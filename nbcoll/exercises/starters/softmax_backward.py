"""Exercise softmax_backward: the gradient of ``y = softmax(x)`` along the last axis, from ``y`` and ``dy``.

Softmax mixes a whole row: every ``y[j]`` depends on every ``x[i]`` of its row through the sum, with
``d y[j] / d x[i] = y[j] * (delta(i, j) - y[i])``. So::

    for each row: dx[i] = sum over j of dy[j] * y[j] * (delta(i, j) - y[i])

Only ``y`` is needed, not ``x``: that is why nbcoll's softmax keeps its output for the backward. Check your
work with::

    python -m nbcoll exercise softmax_backward --check softmax_backward.py
"""

import numpy as np


def softmax_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    # Plan:
    #   1. expand the sum: the delta term gives dy[i] * y[i]; the other term is y[i] * sum over j of dy[j] * y[j]
    #   2. the sum is one number per row: (dy * y).sum(axis=-1, keepdims=True), so that it broadcasts
    #   3. return dx with the shape of y
    raise NotImplementedError("softmax_backward: write dx")
