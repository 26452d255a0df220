"""Softmax and log-softmax along one axis, each with its fused backward kernel.

::

    y = softmax(x)        dx = y * (dy - sum(dy * y, axis))
    y = log_softmax(x)    dx = dy - exp(y) * sum(dy, axis)

The kernels are :mod:`nbcoll.kernels.softmax`'s. :func:`softmax` and :func:`log_softmax` are both the Tensor
methods and the ``F.*`` forms.

Example::

    >>> import nbcoll
    >>> Softmax.apply(nbcoll.tensor([[1.0, 1.0]]), -1).numpy()      # what logits.softmax(axis=-1) does
    array([[0.5, 0.5]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import softmax as softmax_kernels
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


class Softmax(Function):
    """``y = exp(x - max) / sum(exp(x - max))`` along ``axis``"""

    @staticmethod
    def forward(ctx: Context, x: Any, axis: int = -1) -> Any:
        y = softmax_kernels.softmax(x, axis=axis)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        (y,) = ctx.saved_tensors
        return softmax_kernels.softmax_backward(y, dy, axis=ctx.axis), None


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``y[i] = exp(x[i]) / sum_j exp(x[j])`` along ``axis``, computed from ``x - max(x)`` so it cannot overflow:
    ``x.softmax(axis)`` or ``F.softmax(x, axis)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.softmax(nbcoll.tensor([0.0, 0.0, 0.0, 0.0])).numpy()
    array([0.25, 0.25, 0.25, 0.25], dtype=float32)
    >>> nbcoll.tensor([[1.0, 1.0]]).softmax().numpy()
    array([[0.5, 0.5]], dtype=float32)
    """
    return Softmax.apply(x, axis)


class LogSoftmax(Function):
    """``y = x - max - log(sum(exp(x - max)))`` along ``axis``"""

    @staticmethod
    def forward(ctx: Context, x: Any, axis: int = -1) -> Any:
        y = softmax_kernels.log_softmax(x, axis=axis)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        (y,) = ctx.saved_tensors
        return softmax_kernels.log_softmax_backward(y, dy, axis=ctx.axis), None


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``y[i] = x[i] - log(sum_j exp(x[j]))`` along ``axis``: the log of :func:`softmax`, without its rounding;
    ``x.log_softmax(axis)`` or ``F.log_softmax(x, axis)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.log_softmax(nbcoll.tensor([0.0, 0.0])).numpy()
    array([-0.6931472, -0.6931472], dtype=float32)
    """
    return LogSoftmax.apply(x, axis)


# The Tensor methods of this module.
Tensor.softmax, Tensor.log_softmax = softmax, log_softmax
