"""Accumulating in a wider type: GPUs have no atomic add for 8-bit integers and float16.

::

    accumulate_dtype(int8) = int32,  accumulate_dtype(uint8) = uint32,  accumulate_dtype(float16) = float32
    copy_as(x, dtype):     for i: out[i] = dtype(x[i])     # 8-bit targets wrap around as NumPy's integers do

The ``*_add`` operations of :mod:`nbcoll.kernels.index` and :mod:`nbcoll.kernels.lookup` add into a buffer of
the wider type, then :func:`copy_as` brings the sums back to the element type; integer sums wrap around exactly.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels.widen import accumulate_dtype, copy_as
    >>> accumulate_dtype(np.dtype(np.int8)), accumulate_dtype(np.dtype(np.float64))
    (dtype('int32'), dtype('float64'))
    >>> nbcoll.to_host(copy_as(nbcoll.to_device(np.array([127, 128, 300], np.int32)), np.dtype(np.int8)))
    array([ 127, -128,   44], dtype=int8)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels import index_args
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view
from nbcoll.kernels.registry import register

ACCUMULATE_DTYPE = {
    np.dtype(np.int8): np.dtype(np.int32),
    np.dtype(np.uint8): np.dtype(np.uint32),
    np.dtype(np.float16): np.dtype(np.float32),
}
"""The type that atomic additions use for element types that have no hardware atomic add."""


def accumulate_dtype(dtype: np.dtype) -> np.dtype:
    """The type the ``*_add`` operations accumulate ``dtype`` in: a wider one where atomics lack ``dtype``."""
    return ACCUMULATE_DTYPE.get(np.dtype(dtype), np.dtype(dtype))


def copy_as_reference(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x.astype(dtype)``: NumPy's integer casts already wrap around."""
    return x.astype(dtype)


@register(
    "void(float32[::1], float16[::1])",
    "void(float16[::1], float32[::1])",
    "void(int8[::1], int32[::1])",
    "void(uint8[::1], uint32[::1])",
)
@cuda.jit
def convert_kernel(src, dst):
    # One thread converts one element into dst's type: widening integers, or floats to and from float16.
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i]


@register(
    "void(int32[::1], int64, int8[::1])",
    "void(uint32[::1], int64, uint8[::1])",
)
@cuda.jit
def wrap_to_8_bits_kernel(acc, low, out):
    # One thread brings one wide sum back into 8 bits, wrapping around as int8 (low = -128) or uint8 (low = 0)
    # arithmetic would have: the 8-bit result is the sum modulo 256, shifted into [low, low + 256).
    i = cuda.grid(1)
    if i < out.size:
        out[i] = ((acc[i] - low) & 255) + low


@dispatch(reference=copy_as_reference)
def copy_as(x: Any, dtype: np.dtype) -> Any:
    """A new device array with the values of ``x`` in ``dtype`` (``x`` is C-contiguous)."""
    out = memory.empty(tuple(x.shape), dtype)
    if x.size == 0:
        return out
    if x.dtype == dtype:
        out.copy_to_device(x)
    elif dtype.kind in "iu" and dtype.itemsize == 1:
        index_args.launch(wrap_to_8_bits_kernel, x.size, flat_view(x), np.int64(np.iinfo(dtype).min), flat_view(out))
    else:
        index_args.launch(convert_kernel, x.size, flat_view(x), flat_view(out))
    return out
