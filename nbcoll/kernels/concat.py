"""Concatenate arrays along an axis, split one array into pieces, cut or pad one block: one copy kernel for all.

::

    concat(arrays, axis):   out = zeros(...);  start = 0
                            for a in arrays:  out[..., start : start + a.shape[axis], ...] = a;  start += ...
    split(x, sizes, axis):  start = 0
                            for size in sizes:  piece = x[..., start : start + size, ...];  start += size
    narrow(x, axis, start, length):   piece = x[..., start : start + length, ...]
    pad(piece, shape, axis, start):   out = zeros(shape);  out[:p0, ..., start : start + p_axis, ..., :pk] = piece

Both copy a *block* of a larger array, at an offset along one axis, to or from a contiguous array. The block is
the piece's shape seen with the larger array's strides, so the kernel needs nothing but the
``offset_of(i, shape, strides)`` rule of :mod:`nbcoll.kernels.indexing` on each side::

    for i in range(size(piece)):  dst[dst_base + offset_of(i, piece_shape, dst_strides)] =
                                  src[src_base + offset_of(i, piece_shape, src_strides)]

Example::

    from nbcoll.kernels import concat
    qkv = concat.concat([q, k, v], axis=-1)
    q, k, v = concat.split(qkv, [d, d, d], axis=-1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import contiguous_strides, launch_1d, offset_of_device, size_of
from nbcoll.kernels.registry import register

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def concat_reference(arrays: Sequence[np.ndarray], axis: int) -> np.ndarray:
    return np.concatenate(arrays, axis=axis)


def narrow_reference(x: np.ndarray, axis: int, start: int, length: int) -> np.ndarray:
    return np.ascontiguousarray(np.take(x, np.arange(start, start + length), axis=axis))


def pad_reference(piece: np.ndarray, shape: Sequence[int], axis: int = 0, start: int = 0) -> np.ndarray:
    """Zeros of ``shape`` with ``piece`` at ``start`` along ``axis`` and at the origin of every other axis."""
    out = np.zeros(tuple(shape), piece.dtype)
    block = [slice(0, n) for n in piece.shape]
    block[axis] = slice(start, start + piece.shape[axis])
    out[tuple(block)] = piece
    return out


def split_reference(x: np.ndarray, sizes: Sequence[int], axis: int) -> list[np.ndarray]:
    """``np.split`` at the running sums of ``sizes``, each piece copied to a contiguous array."""
    boundaries = np.cumsum(sizes)[:-1]
    return [np.ascontiguousarray(piece) for piece in np.split(x, boundaries, axis=axis)]


# ---------------------------------------------------------------------------------------------------------------
# Kernel.


@register(
    "void(float32[::1], int64, UniTuple(int64, 2), float32[::1], int64, UniTuple(int64, 2), UniTuple(int64, 2), int64)",
    "void(int8[::1], int64, UniTuple(int64, 1), int8[::1], int64, UniTuple(int64, 1), UniTuple(int64, 1), int64)",
    "void(float16[::1], int64, UniTuple(int64, 3), float16[::1], int64, UniTuple(int64, 3), UniTuple(int64, 3), int64)",
    "void(uint64[::1], int64, UniTuple(int64, 4), uint64[::1], int64, UniTuple(int64, 4), UniTuple(int64, 4), int64)",
)
@cuda.jit
def block_copy_kernel(src, src_base, src_strides, dst, dst_base, dst_strides, piece_shape, n):
    # One thread copies one of the n elements of the piece: the same row-major position i on both sides,
    # placed in each array by its own strides.
    i = cuda.grid(1)
    if i < n:
        source = src_base + offset_of_device(i, piece_shape, src_strides)
        dst[dst_base + offset_of_device(i, piece_shape, dst_strides)] = src[source]


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _axis(axis: int, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis: expected an int in [{-ndim}, {ndim}) for {ndim}-d arrays, got {axis!r}")
    return int(axis) % ndim


def _copy_block(
    src: Any,
    src_base: int,
    src_strides: tuple,
    dst: Any,
    dst_base: int,
    dst_strides: tuple,
    piece_shape: tuple[int, ...],
) -> None:
    n = size_of(piece_shape)
    if n:
        flat_src, flat_dst = src.reshape(size_of(src.shape)), dst.reshape(size_of(dst.shape))
        launch_1d(
            block_copy_kernel, n, flat_src, src_base, src_strides, flat_dst, dst_base, dst_strides, piece_shape, n
        )


def concat(arrays: Sequence[Any], axis: int = 0) -> Any:
    """``np.concatenate(arrays, axis)``: same dtype and ndim (>= 1), equal shapes except along ``axis``."""
    if not isinstance(arrays, (list, tuple)) or not arrays:
        raise ValueError("arrays: expected a non-empty list or tuple of device arrays")
    arrays = [memory.as_device_array(a, f"arrays[{k}]") for k, a in enumerate(arrays)]
    first = arrays[0]
    memory.check_dtype(first.dtype, "arrays[0].dtype")
    if first.ndim == 0:
        raise ValueError("arrays[0]: 0-d arrays cannot be concatenated; give them a dimension first")
    axis = _axis(axis, first.ndim)
    for k, a in enumerate(arrays):
        memory.require_contiguous(a, f"arrays[{k}]")
        if a.dtype != first.dtype:
            raise TypeError(f"arrays[{k}].dtype: all arrays need arrays[0]'s dtype {first.dtype}, got {a.dtype}")
        same = a.ndim == first.ndim and all(a.shape[d] == first.shape[d] for d in range(first.ndim) if d != axis)
        if not same:
            raise ValueError(
                f"arrays[{k}]: shape {tuple(a.shape)} must equal arrays[0].shape={tuple(first.shape)} "
                f"on every axis except {axis}"
            )
    return _concat(arrays, axis)


@dispatch(reference=concat_reference)
def _concat(arrays: Sequence[Any], axis: int) -> Any:
    first = arrays[0]
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = memory.empty(tuple(shape), first.dtype)
    out_strides = contiguous_strides(shape)
    start = 0
    for a in arrays:
        piece_shape = tuple(a.shape)
        _copy_block(a, 0, contiguous_strides(piece_shape), out, start * out_strides[axis], out_strides, piece_shape)
        start += piece_shape[axis]
    return out


def split(x: Any, sizes: Sequence[int], axis: int = 0) -> list[Any]:
    """Cut ``x`` along ``axis`` into contiguous pieces of the given lengths, which must add up to its length.

    The same as ``np.split(x, np.cumsum(sizes)[:-1], axis)``, every piece a new array.
    """
    x = memory.as_device_array(x, "x")
    memory.check_dtype(x.dtype, "x.dtype")
    memory.require_contiguous(x, "x")
    if x.ndim == 0:
        raise ValueError("x: a 0-d array cannot be split")
    axis = _axis(axis, x.ndim)
    sizes = [int(s) for s in sizes]
    if not sizes or any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise ValueError(
            f"sizes: expected non-negative lengths adding up to x.shape[{axis}]={x.shape[axis]}, got {sizes}"
        )
    return _split(x, sizes, axis)


@dispatch(reference=split_reference)
def _split(x: Any, sizes: Sequence[int], axis: int) -> list[Any]:
    x_strides = contiguous_strides(x.shape)
    pieces, start = [], 0
    for size in sizes:
        piece_shape = tuple(size if d == axis else n for d, n in enumerate(x.shape))
        piece = memory.empty(piece_shape, x.dtype)
        _copy_block(x, start * x_strides[axis], x_strides, piece, 0, contiguous_strides(piece_shape), piece_shape)
        pieces.append(piece)
        start += size
    return pieces


def narrow(x: Any, axis: int, start: int, length: int) -> Any:
    """``x[..., start : start + length, ...]`` along ``axis``, as a new contiguous array."""
    x = memory.as_device_array(x, "x")
    memory.check_dtype(x.dtype, "x.dtype")
    memory.require_contiguous(x, "x")
    if x.ndim == 0:
        raise ValueError("x: a 0-d array cannot be narrowed")
    axis = _axis(axis, x.ndim)
    start, length = int(start), int(length)
    if start < 0 or length < 0 or start + length > x.shape[axis]:
        raise ValueError(
            f"start, length: expected 0 <= start and start + length <= x.shape[{axis}]={x.shape[axis]}, "
            f"got start={start} and length={length}"
        )
    return _narrow(x, axis, start, length)


@dispatch(reference=narrow_reference)
def _narrow(x: Any, axis: int, start: int, length: int) -> Any:
    x_strides = contiguous_strides(x.shape)
    piece_shape = tuple(length if d == axis else n for d, n in enumerate(x.shape))
    piece = memory.empty(piece_shape, x.dtype)
    _copy_block(x, start * x_strides[axis], x_strides, piece, 0, contiguous_strides(piece_shape), piece_shape)
    return piece


def pad(piece: Any, shape: Sequence[int], axis: int = 0, start: int = 0) -> Any:
    """A zero array of ``shape`` holding ``piece`` at ``start`` along ``axis``, and at 0 along the other axes.

    The gradient of :func:`narrow` (and of reading the leading block of a larger array).
    """
    piece = memory.as_device_array(piece, "piece")
    memory.check_dtype(piece.dtype, "piece.dtype")
    memory.require_contiguous(piece, "piece")
    shape = tuple(int(n) for n in shape)
    if piece.ndim == 0 or len(shape) != piece.ndim:
        raise ValueError(f"shape: expected {piece.ndim} dimensions (piece.shape={tuple(piece.shape)}), got {shape}")
    axis, start = _axis(axis, piece.ndim), int(start)
    ends = [start + n if d == axis else n for d, n in enumerate(piece.shape)]
    if start < 0 or any(end > limit for end, limit in zip(ends, shape, strict=True)):
        raise ValueError(
            f"piece: shape {tuple(piece.shape)} placed at {start} along axis {axis} does not fit in shape {shape}"
        )
    return _pad(piece, shape, axis, start)


@dispatch(reference=pad_reference)
def _pad(piece: Any, shape: Sequence[int], axis: int, start: int) -> Any:
    out = memory.zeros(shape, piece.dtype)
    out_strides = contiguous_strides(shape)
    piece_shape = tuple(piece.shape)
    _copy_block(piece, 0, contiguous_strides(piece_shape), out, start * out_strides[axis], out_strides, piece_shape)
    return out
