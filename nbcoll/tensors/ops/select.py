"""Choosing between values elementwise: where, clip and masked_fill, and the gradients they let through.

::

    y = where(cond, a, b)          da = unbroadcast(where(cond, dy, 0))    db = unbroadcast(where(cond, 0, dy))
    y = clip(x, lo, hi)            dx = dy where lo <= x <= hi, else 0      (the bounds are numbers: no gradient)
    y = masked_fill(x, mask, v)    dx = dy where not mask, else 0

Example::

    scores = MaskedFill.apply(scores, causal_mask, -np.inf)   # what scores.masked_fill(causal_mask, -inf) does
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.kernels import elementwise
from nbcoll.kernels.elementwise import binary
from nbcoll.tensors import dtypes
from nbcoll.tensors.arrays import scalar, unbroadcast
from nbcoll.tensors.function import Context, Function


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


# ---------------------------------------------------------------------------------------------------------------
# Tensor-level entry points: check the arguments once, settle the dtype, then apply the Function.


def _number(value: Any, arg: str) -> None:
    if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number))):
        raise TypeError(f"{arg}: expected a number or None, got {value!r}; use where() to pick from tensors")


def _bool_tensor(mask: Any, arg: str) -> Any:
    from nbcoll.tensors.tensor import Tensor

    mask = mask if isinstance(mask, Tensor) else Tensor(np.asarray(mask))
    if mask.dtype != np.bool_:
        raise TypeError(f"{arg}: expected a bool Tensor, got dtype {mask.dtype}")
    return mask


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` is true, else ``b``; ``a`` and ``b`` are Tensors or numbers (at least one a Tensor,
    or both numbers), promoted to one dtype as ``a + b`` would be; the three broadcast together."""
    from nbcoll.tensors.tensor import Tensor

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


def clip(x: Any, lo: Any = None, hi: Any = None) -> Any:
    """``min(max(x, lo), hi)``; an integer ``x`` becomes floating when a bound is a float (as ``x * 0.5`` does)."""
    _number(lo, "lo")
    _number(hi, "hi")
    dtype = x.dtype
    for bound in (lo, hi):
        if bound is not None:
            dtype = dtypes.scalar_result_dtype(dtype, bound)
    x = x if dtype == x.dtype else x.astype(dtype)
    return Clip.apply(x, lo, hi)


def masked_fill(x: Any, mask: Any, value: Any) -> Any:
    """``value`` where ``mask`` is true, else ``x``; ``mask`` broadcasts to ``x``'s shape, which the result keeps."""
    from nbcoll.tensors.tensor import Tensor

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
