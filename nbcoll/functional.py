"""Function forms of the Tensor operations, plus the losses and layers built from them.

The shape, joining and indexing functions are written in :mod:`nbcoll.functional_shape` and listed here too.

Example::

    import nbcoll.functional as F
    logits = x @ w + b
    loss = F.cross_entropy(logits, targets)          # mean over the batch of -log softmax(logits)[target]
    loss.backward()

Every function takes Tensors (Python scalars are accepted where a Tensor method accepts them) and returns a
Tensor that records its graph unless ``no_grad`` is active.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.functional_shape import (
    clip,
    concat,
    embedding,
    gather,
    index_select,
    masked_fill,
    permute,
    reshape,
    scatter_add,
    split,
    stack,
    transpose,
    where,
)
from nbcoll.tensors.ops import elementwise as ew
from nbcoll.tensors.ops import matmul as matmul_ops
from nbcoll.tensors.ops import nn
from nbcoll.tensors.tensor import Tensor, tensor


def _tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


# -- elementwise ----------------------------------------------------------------------------------------------


def add(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] + b[i]``, broadcasting; ``a + b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.add(nbcoll.tensor([1.0, 2.0]), 10).numpy()
    array([11., 12.], dtype=float32)
    """
    return _tensor(a) + b


def sub(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] - b[i]``, broadcasting; ``a - b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.sub(nbcoll.tensor([1.0, 2.0]), nbcoll.tensor([0.5, 0.5])).numpy()
    array([0.5, 1.5], dtype=float32)
    """
    return _tensor(a) - b


def mul(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] * b[i]``, broadcasting; ``a * b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.mul(nbcoll.tensor([[1.0], [2.0]]), nbcoll.tensor([1.0, 10.0])).numpy()
    array([[ 1., 10.],
           [ 2., 20.]], dtype=float32)
    """
    return _tensor(a) * b


def div(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] / b[i]``, broadcasting; ``a / b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.div(nbcoll.tensor([1.0, 3.0]), 2).numpy()
    array([0.5, 1.5], dtype=float32)
    """
    return _tensor(a) / b


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - the operator's name
    """``for i: y[i] = a[i] ** b``; ``a ** b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.pow(nbcoll.tensor([2.0, 3.0]), 2).numpy()
    array([4., 9.], dtype=float32)
    """
    return _tensor(a) ** b


def neg(x: Tensor) -> Tensor:
    """``for i: y[i] = -x[i]``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.neg(nbcoll.tensor([1.0, -2.0])).numpy()
    array([-1.,  2.], dtype=float32)
    """
    return -x


def exp(x: Tensor) -> Tensor:
    """``for i: y[i] = exp(x[i])``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.exp(nbcoll.tensor([0.0, 1.0])).numpy()
    array([1.      , 2.718282], dtype=float32)
    """
    return x.exp()


def log(x: Tensor) -> Tensor:
    """``for i: y[i] = log(x[i])``, the natural logarithm.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.log(nbcoll.tensor([1.0, 100.0])).numpy()
    array([0.       , 4.6051702], dtype=float32)
    """
    return x.log()


def sqrt(x: Tensor) -> Tensor:
    """``for i: y[i] = sqrt(x[i])``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.sqrt(nbcoll.tensor([4.0, 9.0])).numpy()
    array([2., 3.], dtype=float32)
    """
    return x.sqrt()


def tanh(x: Tensor) -> Tensor:
    """``for i: y[i] = tanh(x[i])``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.tanh(nbcoll.tensor([0.0, 1.0])).numpy()
    array([0.       , 0.7615942], dtype=float32)
    """
    return x.tanh()


def sigmoid(x: Tensor) -> Tensor:
    """``for i: y[i] = 1 / (1 + exp(-x[i]))``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.sigmoid(nbcoll.tensor([0.0, 2.0])).numpy()
    array([0.5       , 0.88079715], dtype=float32)
    """
    return x.sigmoid()


def relu(x: Tensor) -> Tensor:
    """``for i: y[i] = max(x[i], 0)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.relu(nbcoll.tensor([-1.0, 2.0])).numpy()
    array([0., 2.], dtype=float32)
    """
    return x.relu()


def gelu(x: Tensor) -> Tensor:
    """GELU in its tanh form (PyTorch's ``approximate="tanh"``): ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715
    * x**3)))``, within about 1e-3 of the erf form.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.gelu(nbcoll.tensor([-1.0, 0.0, 1.0])).numpy()
    array([-0.158808,  0.      ,  0.841192], dtype=float32)
    """
    return ew.gelu(x)


def abs(x: Tensor) -> Tensor:  # noqa: A001
    """``for i: y[i] = |x[i]|``; the gradient at 0 is 0.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.abs(nbcoll.tensor([-1.5, 2.0])).numpy()
    array([1.5, 2. ], dtype=float32)
    """
    return x.abs()


# -- reductions, products, softmax ------------------------------------------------------------------------------


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """``y = sum over axis of x`` (every axis when None); ``keepdims`` keeps the summed axes with length 1.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> F.sum(x).item(), F.sum(x, axis=0).numpy()
    (10.0, array([4., 6.], dtype=float32))
    """
    return x.sum(axis=axis, keepdims=keepdims)


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """``y = sum over axis of x / count``, as :func:`sum`.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.mean(nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy()
    array([1.5, 3.5], dtype=float32)
    """
    return x.mean(axis=axis, keepdims=keepdims)


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """``y = max over axis of x``; the gradient goes to the largest element (split evenly between ties).

    >>> import nbcoll, nbcoll.functional as F
    >>> F.max(nbcoll.tensor([[1.0, 5.0], [3.0, 4.0]]), axis=1).numpy()
    array([5., 4.], dtype=float32)
    """
    return x.max(axis=axis, keepdims=keepdims)


def min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """``y = min over axis of x``, as :func:`max`.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.min(nbcoll.tensor([[1.0, 5.0], [3.0, 4.0]]), axis=0).numpy()
    array([1., 4.], dtype=float32)
    """
    return x.min(axis=axis, keepdims=keepdims)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """The index of the largest element along ``axis`` (of the flattened tensor when None), as an int64 Tensor.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.argmax(nbcoll.tensor([[1.0, 5.0], [3.0, 2.0]]), axis=1).numpy()
    array([1, 0])
    """
    return x.argmax(axis=axis, keepdims=keepdims)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy's ``a @ b``: batch dimensions broadcast, 1-D operands are promoted then squeezed.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.matmul(nbcoll.tensor([[1.0, 2.0]]), nbcoll.tensor([[3.0], [4.0]])).numpy()
    array([[11.]], dtype=float32)
    """
    return matmul_ops.matmul(*_tensor(a)._operands(b))


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``y[i] = exp(x[i]) / sum_j exp(x[j])`` along ``axis``, computed from ``x - max(x)`` so it cannot overflow.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.softmax(nbcoll.tensor([0.0, 0.0, 0.0, 0.0])).numpy()
    array([0.25, 0.25, 0.25, 0.25], dtype=float32)
    """
    return x.softmax(axis=axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``y[i] = x[i] - log(sum_j exp(x[j]))`` along ``axis``: the log of :func:`softmax`, without its rounding.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.log_softmax(nbcoll.tensor([0.0, 0.0])).numpy()
    array([-0.6931472, -0.6931472], dtype=float32)
    """
    return x.log_softmax(axis=axis)


# -- layers and losses ------------------------------------------------------------------------------------------


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each row over the last axis to mean 0 and variance 1, then scale by weight and shift by bias.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.layer_norm(nbcoll.tensor([[1.0, 3.0], [5.0, 5.0]])).numpy().round(3)
    array([[-1.,  1.],
           [ 0.,  0.]], dtype=float32)
    """
    return nn.LayerNorm.apply(x, weight, bias, eps)


def dropout(x: Tensor, p: float = 0.5, seed: int = 0, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``; identity unless training.

    The same ``seed`` gives the same mask on every backend.

    >>> import numpy as np, nbcoll, nbcoll.functional as F
    >>> y = F.dropout(nbcoll.tensor(np.ones(1000)), p=0.5, seed=0)
    >>> np.unique(y.numpy()), 0.9 < y.numpy().mean() < 1.1
    (array([0., 2.]), np.True_)
    """
    if not 0 <= p < 1:
        raise ValueError(f"p: expected a probability in [0, 1), got {p}")
    if not training or p == 0:
        return x
    return nn.Dropout.apply(x, p, seed)


def cross_entropy(logits: Tensor, targets: Any) -> Tensor:
    """Mean over the batch of ``-log softmax(logits)[target]``; logits (N, C), targets N integer classes.

    >>> import nbcoll, nbcoll.functional as F
    >>> logits = nbcoll.tensor([[0.0, 0.0], [10.0, 0.0]])
    >>> round(F.cross_entropy(logits, [0, 0]).item(), 4)          # (log 2 + ~0) / 2
    0.3466
    """
    if logits.ndim != 2:
        raise ValueError(f"logits: expected shape (batch, classes), got {logits.shape}")
    targets = targets if isinstance(targets, Tensor) else tensor(np.asarray(targets))
    if targets.dtype.kind not in "iu" or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"targets: expected {logits.shape[0]} integer class indices (shape {logits.shape[:1]}), "
            f"got dtype {targets.dtype} and shape {targets.shape}"
        )
    picked = logits.log_softmax(axis=-1).gather(targets.reshape(-1, 1), axis=1)
    return -picked.mean()


def mse_loss(pred: Tensor, target: Any) -> Tensor:
    """Mean of ``(pred - target) ** 2`` over every element.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.mse_loss(nbcoll.tensor([1.0, 3.0]), nbcoll.tensor([1.0, 1.0])).item()
    2.0
    """
    diff = pred - target
    return (diff * diff).mean()


__all__ = [
    "abs",
    "add",
    "argmax",
    "clip",
    "concat",
    "cross_entropy",
    "div",
    "dropout",
    "embedding",
    "exp",
    "gather",
    "gelu",
    "index_select",
    "layer_norm",
    "log",
    "log_softmax",
    "masked_fill",
    "matmul",
    "max",
    "mean",
    "min",
    "mse_loss",
    "mul",
    "neg",
    "permute",
    "pow",
    "relu",
    "reshape",
    "scatter_add",
    "sigmoid",
    "softmax",
    "split",
    "sqrt",
    "stack",
    "sub",
    "sum",
    "tanh",
    "transpose",
    "where",
]
