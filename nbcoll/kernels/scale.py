"""Scaling in place: ``dst *= factor`` and ``dst /= n``, the extra steps of premul_sum and avg.

::

    scale(dst, factor):    for i: dst[i] = dst[i] * factor      # premul(dst, s) is the same, for premul_sum(s)
    divide(dst, n):        for i: dst[i] = dst[i] // n          # integers, rounding toward minus infinity
                           for i: dst[i] = dst[i] / n           # floats

The scalar is converted to ``dst``'s dtype first; an integer dtype accepts only a whole number it can hold.
float16 is widened to float32 for the arithmetic and rounded back, as :mod:`nbcoll.kernels.combine` does.
bfloat16, float8_e4m3fn and float8_e5m2 are stored, not computed on: their arithmetic is float32 too, with the
scalar kept in float32 (as the collectives' premul_sum and avg do), and the result is rounded once::

    bfloat16:              for i: dst[i] = bfloat16(float32(dst[i]) / float32(n))

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import scale
    >>> x = nbcoll.to_device(np.array([3, -3, 8], np.int32))
    >>> nbcoll.to_host(scale.divide(x, 2))             # NumPy's floor division: -3 // 2 == -2
    array([ 1, -2,  4], dtype=int32)
    >>> nbcoll.to_host(scale.scale(x, 3))
    array([ 3, -6, 12], dtype=int32)
    >>> b = nbcoll.to_device(np.array([3.0, -1.0], nbcoll.bfloat16))
    >>> nbcoll.to_host(scale.divide(b, 2)).astype(np.float32)   # a true division, not the words' floor division
    array([ 1.5, -0.5], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda
from numba.types import float16, float32

from nbcoll import memory
from nbcoll.kernels import low_precision as lp
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view, launch_1d
from nbcoll.kernels.registry import register

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def accumulation_dtype(dtype: Any) -> np.dtype:
    """The dtype the arithmetic runs in: float32 for float16, bfloat16 and fp8, the dtype itself otherwise."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 or lp.is_low_precision(dtype) else dtype


def scale_reference(x: np.ndarray, factor: Any) -> np.ndarray:
    """``for i: out[i] = x[i] * factor``, with ``factor`` first converted to ``x.dtype`` (to float32 for bfloat16
    and fp8, whose arithmetic is float32's)."""
    acc = accumulation_dtype(x.dtype)
    factor = acc.type(factor) if lp.is_low_precision(x.dtype) else acc.type(x.dtype.type(factor))
    with np.errstate(all="ignore"):
        return (x.astype(acc) * factor).astype(x.dtype)


def divide_reference(x: np.ndarray, n: int) -> np.ndarray:
    """``for i: out[i] = x[i] // n`` for integers (NumPy's floor division), ``x[i] / n`` for floats."""
    if x.dtype.kind == "f" or lp.is_low_precision(x.dtype):
        acc = accumulation_dtype(x.dtype)
        with np.errstate(all="ignore"):
            return (x.astype(acc) / acc.type(n)).astype(x.dtype)
    wide = np.dtype(np.uint64) if x.dtype == np.uint64 else np.dtype(np.int64)
    return np.floor_divide(x.astype(wide), wide.type(n)).astype(x.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels: each scales its array in place.


@register(
    "void(float32[::1], float32)",
    "void(int8[::1], int8)",
    "void(uint64[::1], uint64)",
    "void(float64[::1], float64)",
)
@cuda.jit
def scale_kernel(x, factor):
    # One thread scales one element in place; factor has x's dtype.
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] * factor


@register("void(float16[::1], float32)")
@cuda.jit
def scale_float16_kernel(x, factor):
    # One thread scales one float16 element, in float32.
    i = cuda.grid(1)
    if i < x.size:
        x[i] = float16(float32(x[i]) * factor)


@register("void(int8[::1], int64)", "void(int32[::1], int64)", "void(uint64[::1], uint64)")
@cuda.jit
def floor_divide_kernel(x, n):
    # One thread divides one integer element in place, rounding toward minus infinity like NumPy's //.
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] // n


@register("void(float32[::1], float32)", "void(float64[::1], float64)")
@cuda.jit
def true_divide_kernel(x, n):
    # One thread divides one floating element in place.
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] / n


@register("void(float16[::1], float32)")
@cuda.jit
def true_divide_float16_kernel(x, n):
    # One thread divides one float16 element, in float32.
    i = cuda.grid(1)
    if i < x.size:
        x[i] = float16(float32(x[i]) / n)


# ---------------------------------------------------------------------------------------------------------------
# Launch functions: check the arguments, then run the kernel or, on the numpy backend, the reference.


def _scalar_in_dtype(value: Any, dtype: np.dtype, arg: str) -> Any:
    """``value`` converted to ``dtype``; an integer dtype accepts only a whole number it can hold."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{arg}: expected a real number, got {type(value).__name__}")
    if lp.is_low_precision(dtype):
        return np.float32(value)  # their arithmetic is float32's
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if float(value) != math.floor(float(value)) or not info.min <= int(value) <= info.max:
            raise ValueError(f"{arg}: {value} cannot be represented exactly as {dtype}")
        return dtype.type(int(value))
    return dtype.type(value)


def scale(dst: Any, factor: float) -> Any:
    """``for i: dst[i] = dst[i] * factor``, in place, with ``factor`` converted to ``dst.dtype`` first.

    For an integer dtype ``factor`` must be a whole number the dtype can hold (a ``ValueError`` otherwise);
    products wrap around like NumPy's. For bfloat16 and fp8, ``factor`` stays float32 and each product is
    float32's, rounded once.
    """
    return _scale(dst, factor, "factor")


def premul(dst: Any, scalar: float) -> Any:
    """``for i: dst[i] = dst[i] * scalar`` in ``dst.dtype``: the first step of ``premul_sum(scalar)``.

    For bfloat16 and fp8, ``scalar`` stays float32 and each product is rounded once, as the collectives do."""
    return _scale(dst, scalar, "scalar")


def _scale(dst: Any, factor: float, arg: str) -> Any:
    dst = memory.contiguous_input(dst, "dst")
    return _scale_in_place(dst, _scalar_in_dtype(factor, dst.dtype, arg))


def _scale_in_place_reference(dst: Any, factor: Any) -> Any:
    dst[...] = scale_reference(dst, factor)
    return dst


@dispatch(reference=_scale_in_place_reference)
def _scale_in_place(dst: Any, factor: Any) -> Any:
    if lp.is_low_precision(dst.dtype):
        lp.scale_in_float32(dst, factor, False)  # the kernels see the 16- or 8-bit words, never the dtype
    elif dst.dtype == np.float16:
        launch_1d(scale_float16_kernel, dst.size, flat_view(dst), np.float32(factor))
    else:
        launch_1d(scale_kernel, dst.size, flat_view(dst), factor)
    return dst


def divide(dst: Any, n: int) -> Any:
    """``for i: dst[i] = dst[i] // n`` for integers, ``dst[i] / n`` for floats, in place: avg's last step.

    Integer division rounds toward minus infinity, as NumPy's ``//`` does; with the non-negative sums of
    counts that avg usually sees, that is the plain quotient. bfloat16 and fp8, stored as integer words, are
    still floats: their quotient is float32's, rounded once.
    """
    dst = memory.contiguous_input(dst, "dst")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n: expected a positive integer (a number of ranks), got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n: expected a positive integer (a number of ranks), got {n}")
    return _divide_in_place(dst, int(n))


def _divide_in_place_reference(dst: Any, n: int) -> Any:
    dst[...] = divide_reference(dst, n)
    return dst


@dispatch(reference=_divide_in_place_reference)
def _divide_in_place(dst: Any, n: int) -> Any:
    if lp.is_low_precision(dst.dtype):
        lp.scale_in_float32(dst, np.float32(n), True)
    elif dst.dtype == np.float16:
        launch_1d(true_divide_float16_kernel, dst.size, flat_view(dst), np.float32(n))
    elif dst.dtype.kind == "f":
        launch_1d(true_divide_kernel, dst.size, flat_view(dst), dst.dtype.type(n))
    else:
        # uint64 // int64 would be computed in float64 by Numba's type rules; keep uint64 in uint64.
        divisor = np.uint64(n) if dst.dtype == np.uint64 else np.int64(n)
        launch_1d(floor_divide_kernel, dst.size, flat_view(dst), divisor)
    return dst


def divide_in_place(dst: Any, n: int) -> None:
    """:func:`divide` on a 1-D contiguous array and a positive ``int``, without checks.

    avg's last step in the collectives, once per final chunk: they check their buffers once, when they are called.
    """
    _divide_in_place(dst, n)
