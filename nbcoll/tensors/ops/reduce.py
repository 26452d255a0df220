"""Reductions over axes (sum, mean, max, min) and their backward: spread the gradient back over the reduced axes.

::

    y = x.sum(axis)      dx = broadcast(dy)                      # every summed element moved y by 1
    y = x.mean(axis)     dx = broadcast(dy) / count
    y = x.max(axis)      dx = broadcast(dy) * (x == max) / ties  # ties share the gradient equally

The kernels are :mod:`nbcoll.kernels.reduce_axes`'s ``reduce`` and, for the backward, those of
:mod:`nbcoll.kernels.elementwise`. After the Functions come the functions that apply
them, each both the Tensor method and the ``F.*`` form (``x.sum(axis=0)`` is ``F.sum(x, axis=0)``), and ``argmax``,
which has no gradient.

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> Sum.apply(x, (0,), False).numpy()         # what x.sum(axis=0) does
    array([4., 6.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels.elementwise import binary, where
from nbcoll.kernels.reduce_axes import reduce
from nbcoll.tensors.arrays import Shape, broadcast_to, keepdims_shape, normalize_axes, scalar
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


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


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """``y = sum over axis of x`` (every axis when None); ``keepdims`` keeps the summed axes with length 1:
    ``x.sum(...)`` or ``F.sum(x, ...)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> F.sum(x).item(), F.sum(x, axis=0).numpy()
    (10.0, array([4., 6.], dtype=float32))
    >>> x.sum(axis=1, keepdims=True).numpy()
    array([[3.],
           [7.]], dtype=float32)
    """
    return Sum.apply(x, axis, keepdims)


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


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """``y = sum over axis of x / count``, as :func:`sum`: ``x.mean(...)`` or ``F.mean(x, ...)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> F.mean(x, axis=1).numpy(), x.mean().item()
    (array([1.5, 3.5], dtype=float32), 2.5)
    """
    return Mean.apply(x, axis, keepdims)


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


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """``y = max over axis of x`` (every axis when None); the gradient goes to the largest element, split evenly
    between ties: ``x.max(...)`` or ``F.max(x, ...)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[1.0, 5.0], [3.0, 4.0]])
    >>> F.max(x, axis=1).numpy(), x.max(axis=0).numpy()
    (array([5., 4.], dtype=float32), array([3., 5.], dtype=float32))
    """
    return Extremum.apply(x, "max", axis, keepdims)


def min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """``y = min over axis of x``, as :func:`max`: ``x.min(...)`` or ``F.min(x, ...)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[1.0, 5.0], [3.0, 4.0]])
    >>> F.min(x, axis=0).numpy(), x.min().item()
    (array([1., 4.], dtype=float32), 1.0)
    """
    return Extremum.apply(x, "min", axis, keepdims)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """The index of the first maximum along ``axis`` (of the flattened tensor when None), an int64 Tensor with no
    gradient: ``x.argmax(...)`` or ``F.argmax(x, ...)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.argmax(nbcoll.tensor([[1.0, 5.0], [3.0, 2.0]]), axis=1).numpy()
    array([1, 0])
    >>> nbcoll.tensor([[1.0, 7.0, 7.0], [9.0, 4.0, 0.0]]).argmax(axis=1).numpy()
    array([1, 0])
    """
    return x._wrap(reduce("argmax", x.data, axis=axis, keepdims=keepdims))


# The Tensor methods of this module; their names are NumPy's, and shadow the builtins in this file.
Tensor.sum, Tensor.mean, Tensor.max, Tensor.min, Tensor.argmax = sum, mean, max, min, argmax
