"""Choosing between values elementwise: where, clip and masked_fill, and the gradients they let through.

::

    y = where(cond, a, b)          da = unbroadcast(where(cond, dy, 0))    db = unbroadcast(where(cond, 0, dy))
    y = clip(x, lo, hi)            dx = dy where lo <= x <= hi, else 0      (the bounds are numbers: no gradient)
    y = masked_fill(x, mask, v)    dx = dy where not mask, else 0

The kernels are :mod:`nbcoll.kernels.elementwise`'s ``where``, ``maximum`` and ``minimum``. After the Functions
come the functions that check the arguments once, settle the dtype and apply them: :func:`clip` and
:func:`masked_fill` are both the Tensor methods and the ``F.*`` forms, :func:`where` is ``F.where``.

Example::

    >>> import numpy as np, nbcoll
    >>> scores = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> causal_mask = nbcoll.tensor([[False, True], [False, False]])
    >>> MaskedFill.apply(scores, causal_mask, -np.inf).numpy()    # what scores.masked_fill(causal_mask, -inf) does
    array([[  1., -inf],
           [  3.,   4.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.kernels import elementwise
from nbcoll.kernels.elementwise import binary
from nbcoll.tensors import dtypes
from nbcoll.tensors.arrays import scalar, unbroadcast
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


class Where(Function):
    """``for i: y[i] = a[i] if cond[i] else b[i]``, broadcasting the three"""

    @staticmethod
    def forward(ctx: Context, cond: Any, a: Any, b: Any) -> Any:
        ctx.a_shape, ctx.b_shape = tuple(a.shape), tuple(b.shape)
        ctx.save_for_backward(cond)
        return elementwise.where(cond, a, b)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[None, Any, Any]:
        (cond,) = ctx.saved_tensors
        zero = scalar(0, dy.dtype)
        da = unbroadcast(elementwise.where(cond, dy, zero), ctx.a_shape) if ctx.needs_input_grad[1] else None
        db = unbroadcast(elementwise.where(cond, zero, dy), ctx.b_shape) if ctx.needs_input_grad[2] else None
        return None, da, db


class Clip(Function):
    """``for i: y[i] = min(max(x[i], lo), hi)``; ``lo`` or ``hi`` may be None (no bound on that side)"""

    @staticmethod
    def forward(ctx: Context, x: Any, lo: Any, hi: Any) -> Any:
        ctx.lo, ctx.hi = lo, hi
        ctx.save_for_backward(x)
        y = x if lo is None else binary("maximum", x, scalar(lo, x.dtype))
        return y if hi is None else binary("minimum", y, scalar(hi, x.dtype))

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        (x,) = ctx.saved_tensors
        zero = scalar(0, dy.dtype)
        if ctx.lo is not None:
            dy = elementwise.where(binary("lt", x, scalar(ctx.lo, x.dtype)), zero, dy)
        if ctx.hi is not None:
            dy = elementwise.where(binary("gt", x, scalar(ctx.hi, x.dtype)), zero, dy)
        return dy, None, None


class MaskedFill(Function):
    """``for i: y[i] = value if mask[i] else x[i]``; ``mask`` broadcasts to ``x``'s shape"""

    @staticmethod
    def forward(ctx: Context, x: Any, mask: Any, value: Any) -> Any:
        ctx.save_for_backward(mask)
        return elementwise.where(mask, scalar(value, x.dtype), x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        (mask,) = ctx.saved_tensors
        return elementwise.where(mask, scalar(0, dy.dtype), dy), None, None


# -- Tensor methods and F.* forms: check the arguments once, settle the dtype, then apply the Function ------------


def _number(value: Any, arg: str) -> None:
    if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number))):
        raise TypeError(f"{arg}: expected a number or None, got {value!r}; use where() to pick from tensors")


def _bool_tensor(mask: Any, arg: str) -> Tensor:
    mask = mask if isinstance(mask, Tensor) else Tensor(np.asarray(mask))
    if mask.dtype != np.bool_:
        raise TypeError(f"{arg}: expected a bool Tensor, got dtype {mask.dtype}")
    return mask


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] if cond[i] else b[i]`` (``F.where``): ``cond`` a bool Tensor, ``a`` and ``b`` Tensors
    or numbers (at least one a Tensor, or both numbers), promoted to one dtype as ``a + b`` would be, all
    broadcasting together; the gradient goes to ``a`` where cond holds and to ``b`` elsewhere.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([-1.0, 2.0])
    >>> F.where(x > 0, x, 0.0).numpy()
    array([0., 2.], dtype=float32)
    """
    cond = _bool_tensor(cond, "cond")
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(np.asarray(a, dtype=dtypes.scalar_result_dtype(np.bool_, a)))
    if isinstance(a, Tensor):
        a, b = a._operands(b)
    else:
        b, a = b._operands(a)
    shapes = (cond.shape, a.shape, b.shape)
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"cond, a, b: shapes {shapes} do not broadcast together") from None
    return Where.apply(cond, a, b)


def clip(x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
    """``for i: y[i] = min(max(x[i], lo), hi)`` with number bounds (None: no bound); gradient 1 inside
    ``[lo, hi]`` (bounds included, as PyTorch's clamp), 0 outside: ``x.clip(lo, hi)`` or ``F.clip(x, lo, hi)``.
    An integer ``x`` becomes floating when a bound is a float (as ``x * 0.5`` does).

    >>> import nbcoll, nbcoll.functional as F
    >>> F.clip(nbcoll.tensor([-2.0, 0.5, 3.0]), -1, 1).numpy()
    array([-1. ,  0.5,  1. ], dtype=float32)
    >>> nbcoll.tensor([-5.0, 0.5, 5.0]).clip(0, 1).numpy()
    array([0. , 0.5, 1. ], dtype=float32)
    """
    _number(lo, "lo")
    _number(hi, "hi")
    dtype = x.dtype
    for bound in (lo, hi):
        if bound is not None:
            dtype = dtypes.scalar_result_dtype(dtype, bound)
    x = x if dtype == x.dtype else x.astype(dtype)
    return Clip.apply(x, lo, hi)


def masked_fill(x: Tensor, mask: Any, value: Any) -> Tensor:
    """``for i: y[i] = value if mask[i] else x[i]``: ``mask`` a bool Tensor that broadcasts to ``x``'s shape
    (which the result keeps); no gradient flows to the filled positions. ``x.masked_fill(mask, value)`` or
    ``F.masked_fill(x, mask, value)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> scores = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> future = nbcoll.tensor([[False, True], [False, False]])
    >>> F.masked_fill(scores, future, -1e9).numpy()
    array([[ 1.e+00, -1.e+09],
           [ 3.e+00,  4.e+00]], dtype=float32)
    >>> x = nbcoll.tensor([1.0, 2.0, 3.0])
    >>> x.masked_fill(x > 1.5, 0.0).numpy()
    array([1., 0., 0.], dtype=float32)
    """
    mask = _bool_tensor(mask, "mask")
    try:
        fits = np.broadcast_shapes(mask.shape, x.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask: shape {mask.shape} does not broadcast to x.shape {x.shape}")
    value = value.item() if isinstance(value, Tensor) else value
    _number(value, "value")
    if value is None or dtypes.scalar_result_dtype(x.dtype, value) != x.dtype:
        raise TypeError(f"value: {value!r} does not fit x's dtype {x.dtype} without truncation; convert x first")
    return MaskedFill.apply(x, mask, value)


Tensor.clip, Tensor.masked_fill = clip, masked_fill
