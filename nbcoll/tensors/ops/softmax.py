"""Softmax and log-softmax along one axis, each with its fused backward kernel.

::

    y = softmax(x)        dx = y * (dy - sum(dy * y, axis))
    y = log_softmax(x)    dx = dy - exp(y) * sum(dy, axis)

Example::

    p = Softmax.apply(logits, -1)        # what logits.softmax(axis=-1) does
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import softmax as softmax_kernels
from nbcoll.tensors.function import Context, Function


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
