"""Layer normalisation and dropout: fused kernels whose backward kernels sit beside them.

::

    y = (x - mean) * rstd * weight + bias          (over the last axis)
    y = x * mask / (1 - p)                         (mask from a counter-based generator: reproducible per seed)

The kernels are :mod:`nbcoll.kernels.norm`'s and :mod:`nbcoll.kernels.random`'s; :func:`layer_norm` and
:func:`dropout` are ``F.layer_norm`` and ``F.dropout``.

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([[1.0, 3.0]])
    >>> LayerNorm.apply(x, None, None, 1e-5).numpy().round(3)     # what F.layer_norm(x) does
    array([[-1.,  1.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import norm, random
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


class LayerNorm(Function):
    """``for each row: y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias``; weight and bias may be None."""

    @staticmethod
    def forward(ctx: Context, x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
        y, mean, rstd = norm.layer_norm(x, weight, bias, eps=eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any, Any, None]:
        x, mean, rstd, weight = ctx.saved_tensors
        dx, dweight, dbias = norm.layer_norm_backward(dy, x, mean, rstd, weight)
        return dx, dweight, dbias, None


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each row over the last axis to mean 0 and variance 1, then scale by weight and shift by bias.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.layer_norm(nbcoll.tensor([[1.0, 3.0], [5.0, 5.0]])).numpy().round(3)
    array([[-1.,  1.],
           [ 0.,  0.]], dtype=float32)
    """
    return LayerNorm.apply(x, weight, bias, eps)


class Dropout(Function):
    """``for i: y[i] = x[i] * mask[i] / (1 - p)`` where ``mask[i]`` is 1 with probability ``1 - p``."""

    @staticmethod
    def forward(ctx: Context, x: Any, p: float, seed: int) -> Any:
        y, mask = random.dropout(x, p, seed)
        ctx.p = p
        ctx.save_for_backward(mask)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        (mask,) = ctx.saved_tensors
        return random.dropout_backward(dy, mask, ctx.p), None, None


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
    return Dropout.apply(x, p, seed)
