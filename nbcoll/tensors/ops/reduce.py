"""Reductions over axes (sum, mean, max, min) and their backward: spread the gradient back over the reduced axes.

::

    y = x.sum(axis)      dx = broadcast(dy)                      # every summed element moved y by 1
    y = x.mean(axis)     dx = broadcast(dy) / count
    y = x.max(axis)      dx = broadcast(dy) * (x == max) / ties  # ties share the gradient equally

Example::

    y = Sum.apply(x, (0,), False)        # what x.sum(axis=0) does
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels.elementwise import binary, where
from nbcoll.kernels.reduce_axes import reduce
from nbcoll.tensors.arrays import Shape, broadcast_to, keepdims_shape, normalize_axes, scalar
from nbcoll.tensors.function import Context, Function


def _spread(ctx: Context, dy: Any) -> Any:
    """The output gradient, with the reduced axes put back as size 1, repeated over the input's shape."""
    kept: Shape = keepdims_shape(ctx.x_shape, ctx.axes)
    return broadcast_to(dy.reshape(kept), ctx.x_shape)


def _prepare(ctx: Context, x: Any, axis: Any) -> tuple[int, ...]:
    ctx.x_shape = tuple(x.shape)
    ctx.axes = normalize_axes(axis, x.ndim)
    return ctx.axes


class Sum(Function):
    """``y = sum of x over axes``"""

    @staticmethod
    def forward(ctx: Context, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        axes = _prepare(ctx, x, axis)
        return reduce("sum", x, axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        return _spread(ctx, dy), None, None


class Mean(Function):
    """``y = sum of x over axes / count``"""

    @staticmethod
    def forward(ctx: Context, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        axes = _prepare(ctx, x, axis)
        return reduce("mean", x, axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        count = 1
        for d in ctx.axes:
            count *= ctx.x_shape[d]
        return binary("div", _spread(ctx, dy), scalar(count, dy.dtype)), None, None


class Extremum(Function):
    """``y = max (or min) of x over axes``; the gradient goes to the elements equal to it, split among ties."""

    @staticmethod
    def forward(ctx: Context, x: Any, op: str, axis: Any = None, keepdims: bool = False) -> Any:
        axes = _prepare(ctx, x, axis)
        y = reduce(op, x, axis=axes, keepdims=True)
        ctx.save_for_backward(x, y)
        return y if keepdims else y.reshape(tuple(n for d, n in enumerate(x.shape) if d not in axes))

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None, None]:
        x, y = ctx.saved_tensors
        is_extremum = binary("eq", x, y)
        zero, one = scalar(0, dy.dtype), scalar(1, dy.dtype)
        ties = reduce("sum", where(is_extremum, one, zero), axis=ctx.axes, keepdims=True)
        share = binary("div", _spread(ctx, dy), ties)
        return where(is_extremum, share, zero), None, None, None
