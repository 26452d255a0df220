"""Gather and scatter: reading from, and writing to, positions that another array names.

::

    gather(x, index, axis=0):        for i, j: out[i][j] = x[index[i][j]][j]
    scatter(x, index, src, axis=0):  out = copy(x);  for i, j: out[index[i][j]][j] = src[i][j]
    scatter_add(x, index, src, 0):   out = copy(x);  for i, j: out[index[i][j]][j] += src[i][j]
    scatter_nd(indices, updates, shape):   out = zeros(shape);  for b: out[indices[b]] += updates[b]

Gather is the easy direction: every thread writes its own output element and only *reads* from a computed
place. Scatter is the hard one: two threads whose indices are equal write the same element, and nothing orders
them. ``scatter`` accepts that (one of the writers wins, which one is not defined); the ``*_add`` operations make
every write an atomic read-modify-write (``cuda.atomic.add``), so duplicates add up. GPUs have no atomic add for
8-bit integers and float16, so those accumulate in a wider type (int32, uint32, float32; see
:mod:`nbcoll.kernels.widen`) and are cast back at the end; integer sums wrap around exactly as NumPy's do.

Every index is checked on the host before any kernel runs (:mod:`nbcoll.kernels.index_args`): an index out of
range raises ``IndexError`` naming the argument and the bad value, instead of a kernel reading or writing outside
an array. The row lookups ``index_select``, ``embedding`` and ``embedding_backward`` live in
:mod:`nbcoll.kernels.lookup` and can be imported from here too.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import index
    >>> x = nbcoll.to_device(np.array([[1, 2], [3, 4], [5, 6]], np.float32))
    >>> picks = nbcoll.to_device(np.array([[2, 0], [1, 1]]))
    >>> nbcoll.to_host(index.gather(x, picks, 0))                 # out[i][j] = x[picks[i][j]][j]
    array([[5., 2.],
           [3., 4.]], dtype=float32)
    >>> nbcoll.to_host(index.scatter_add(x, picks, x[:2], 0))     # out[picks[i][j]][j] += x[i][j]
    array([[1., 4.],
           [6., 8.],
           [6., 6.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import cuda, int64

from nbcoll import memory
from nbcoll.kernels import index_args
from nbcoll.kernels.copy import cast
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.index_args import check_indices, index_input, positive_axis
from nbcoll.kernels.indexing import contiguous_strides, flat_view, offset_of_device, size_of
from nbcoll.kernels.lookup import (  # noqa: F401  (the row lookups, importable from here as before)
    embedding,
    embedding_backward,
    embedding_backward_reference,
    embedding_reference,
    index_select,
    index_select_reference,
)
from nbcoll.kernels.registry import register
from nbcoll.kernels.widen import ACCUMULATE_DTYPE, accumulate_dtype  # noqa: F401

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def _block(shape: Sequence[int]) -> tuple[slice, ...]:
    """The slices that cut a larger array down to its leading block of ``shape``."""
    return tuple(slice(0, n) for n in shape)


def _coordinates(index: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Full coordinates of the elements that ``index`` addresses: its own, except ``index`` along ``axis``."""
    coords = list(np.indices(index.shape, sparse=True))
    coords[axis] = index.astype(np.int64)
    return tuple(coords)


def gather_reference(x: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    """``out[i][j] = x[index[i][j]][j]`` (for ``axis == 0``): ``torch.gather``."""
    return x[_coordinates(index, axis)]


def scatter_reference(x: np.ndarray, index: np.ndarray, src: np.ndarray, axis: int) -> np.ndarray:
    """``out = copy(x); out[index[i][j]][j] = src[i][j]``; with duplicate indices the last write wins here."""
    out = x.copy()
    out[_coordinates(index, axis)] = src[_block(index.shape)]
    return out


def scatter_add_reference(x: np.ndarray, index: np.ndarray, src: np.ndarray, axis: int) -> np.ndarray:
    """``out = copy(x); out[index[i][j]][j] += src[i][j]``, duplicates adding up, in the accumulation type."""
    out = x.astype(accumulate_dtype(x.dtype))
    np.add.at(out, _coordinates(index, axis), src[_block(index.shape)])
    return out.astype(x.dtype)


def scatter_nd_reference(indices: np.ndarray, updates: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``out = zeros(shape); out[indices[b]] += updates[b]``: TensorFlow's ``scatter_nd``."""
    depth = indices.shape[-1]
    rows = indices.reshape(size_of(indices.shape[:-1]), depth).astype(np.int64)
    # Row b of indices names slice number rows[b] . strides of the (shape[:depth]) grid of slices.
    slice_numbers = rows @ np.array(contiguous_strides(shape[:depth]), np.int64).reshape(depth)
    slice_size = size_of(shape[depth:])
    out = np.zeros((size_of(shape[:depth]), slice_size), accumulate_dtype(updates.dtype))
    np.add.at(out, slice_numbers, updates.reshape(rows.shape[0], slice_size))
    out = out.reshape(tuple(shape))
    return out.astype(updates.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels. Arrays arrive flattened to 1-D; shapes and strides (in elements) arrive as tuples.


@register(
    "void(float32[::1], UniTuple(int64, 2), int64, int64[::1], UniTuple(int64, 2), float32[::1])",
    "void(int8[::1], UniTuple(int64, 1), int64, int32[::1], UniTuple(int64, 1), int8[::1])",
    "void(float16[::1], UniTuple(int64, 3), int64, uint8[::1], UniTuple(int64, 3), float16[::1])",
)
@cuda.jit
def gather_kernel(x, x_strides_off_axis, axis_stride, index, index_shape, out):
    # One thread fills one output element: its coordinates in x are its own, except along the axis.
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[offset_of_device(i, index_shape, x_strides_off_axis) + int64(index[i]) * axis_stride]


@register(
    "void(float32[::1], UniTuple(int64, 2), int64, int64[::1], UniTuple(int64, 2), float32[::1], UniTuple(int64, 2))",
    "void(uint64[::1], UniTuple(int64, 1), int64, int32[::1], UniTuple(int64, 1), uint64[::1], UniTuple(int64, 1))",
)
@cuda.jit
def scatter_kernel(out, out_strides_off_axis, axis_stride, index, index_shape, src, src_strides):
    # One thread writes one element of src to where index sends it; duplicates race and one of them wins.
    i = cuda.grid(1)
    if i < index.size:
        target = offset_of_device(i, index_shape, out_strides_off_axis) + int64(index[i]) * axis_stride
        out[target] = src[offset_of_device(i, index_shape, src_strides)]


@register(
    "void(float32[::1], UniTuple(int64, 2), int64, int64[::1], UniTuple(int64, 2), float32[::1], UniTuple(int64, 2))",
    "void(int32[::1], UniTuple(int64, 1), int64, int64[::1], UniTuple(int64, 1), int8[::1], UniTuple(int64, 1))",
    "void(uint64[::1], UniTuple(int64, 3), int64, uint32[::1], UniTuple(int64, 3), uint64[::1], UniTuple(int64, 3))",
    "void(float64[::1], UniTuple(int64, 2), int64, int64[::1], UniTuple(int64, 2), float64[::1], UniTuple(int64, 2))",
)
@cuda.jit
def scatter_add_kernel(acc, acc_strides_off_axis, axis_stride, index, index_shape, src, src_strides):
    # One thread adds one element of src where index sends it; the atomic add makes duplicates sum, not race.
    i = cuda.grid(1)
    if i < index.size:
        target = offset_of_device(i, index_shape, acc_strides_off_axis) + int64(index[i]) * axis_stride
        cuda.atomic.add(acc, target, src[offset_of_device(i, index_shape, src_strides)])


@register(
    "void(int64[::1], int64, UniTuple(int64, 2), float32[::1], int64, float32[::1])",
    "void(int32[::1], int64, UniTuple(int64, 3), int8[::1], int64, int32[::1])",
)
@cuda.jit
def scatter_nd_kernel(indices, depth, strides, updates, slice_size, acc):
    # One thread adds one element of updates: row b of indices names where slice b of updates goes.
    t = cuda.grid(1)
    if t < updates.size:
        b = t // slice_size
        target = t - b * slice_size
        for k in range(depth):
            target += int64(indices[b * depth + k]) * strides[k]
        cuda.atomic.add(acc, target, updates[t])


# ---------------------------------------------------------------------------------------------------------------
# Argument checks that gather and scatter share.


def _strides_off_axis(shape: Sequence[int], axis: int) -> tuple[tuple[int, ...], int]:
    """Element strides of a contiguous ``shape`` with the one of ``axis`` taken out (and returned alone)."""
    strides = contiguous_strides(shape)
    return tuple(0 if d == axis else s for d, s in enumerate(strides)), strides[axis]


def _check_index_fits(index: Any, other: Any, axis: int, other_arg: str, skip_axis: bool) -> None:
    for d, (n, limit) in enumerate(zip(index.shape, other.shape, strict=True)):
        if n > limit and not (skip_axis and d == axis):
            raise ValueError(
                f"index, {other_arg}: index.shape={tuple(index.shape)} may not exceed "
                f"{other_arg}.shape={tuple(other.shape)} on dimension {d}"
                + (f" (except the axis {axis})" if skip_axis else "")
            )


def _check_index_args(x: Any, index: Any, axis: int, src: Any | None) -> int:
    """Check gather's or scatter's arguments (torch's rules) and every index; return the axis, made positive."""
    if x.ndim == 0:
        raise ValueError("x: needs at least one dimension, got a 0-d array")
    if index.ndim != x.ndim:
        raise ValueError(f"index: must have x's number of dimensions ({x.ndim}), got shape {tuple(index.shape)}")
    axis = positive_axis(axis, x.ndim)
    _check_index_fits(index, x, axis, "x", skip_axis=True)
    if src is not None:
        if src.dtype != x.dtype:
            raise TypeError(f"src.dtype: must equal x.dtype ({x.dtype}), got {src.dtype}")
        if src.ndim != x.ndim:
            raise ValueError(f"src: must have x's number of dimensions ({x.ndim}), got shape {tuple(src.shape)}")
        _check_index_fits(index, src, axis, "src", skip_axis=False)
    check_indices(index, x.shape[axis], "index")
    return axis


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def gather(x: Any, index: Any, axis: int = 0) -> Any:
    """``torch.gather``: ``out`` has ``index``'s shape and ``out[i][j] = x[index[i][j]][j]`` (for ``axis=0``).

    ``index`` has ``x``'s number of dimensions and is no larger than ``x`` on every other axis.
    """
    x, index = memory.contiguous_input(x, "x"), index_input(index, "index")
    axis = _check_index_args(x, index, axis, None)
    return _gather(x, index, axis)


@dispatch(reference=gather_reference)
def _gather(x: Any, index: Any, axis: int) -> Any:
    out = memory.empty(tuple(index.shape), x.dtype)
    strides, axis_stride = _strides_off_axis(x.shape, axis)
    index_args.launch(
        gather_kernel,
        index.size,
        flat_view(x),
        strides,
        axis_stride,
        flat_view(index),
        tuple(index.shape),
        flat_view(out),
    )
    return out


def scatter(x: Any, index: Any, src: Any, axis: int = 0) -> Any:
    """A copy of ``x`` with ``out[index[i][j]][j] = src[i][j]`` (for ``axis=0``): ``torch.scatter``.

    Where ``index`` repeats a position, one of the competing writes wins and which one is not defined (threads
    run in no fixed order). Use :func:`scatter_add` to combine duplicates.
    """
    x, index, src = memory.contiguous_input(x, "x"), index_input(index, "index"), memory.contiguous_input(src, "src")
    axis = _check_index_args(x, index, axis, src)
    return _scatter(x, index, src, axis)


@dispatch(reference=scatter_reference)
def _scatter(x: Any, index: Any, src: Any, axis: int) -> Any:
    out = cast(x, x.dtype)
    strides, axis_stride = _strides_off_axis(x.shape, axis)
    index_args.launch(
        scatter_kernel,
        index.size,
        flat_view(out),
        strides,
        axis_stride,
        flat_view(index),
        tuple(index.shape),
        flat_view(src),
        contiguous_strides(src.shape),
    )
    return out


def scatter_add(x: Any, index: Any, src: Any, axis: int = 0) -> Any:
    """A copy of ``x`` with ``out[index[i][j]][j] += src[i][j]`` (for ``axis=0``), every duplicate adding up.

    int8, uint8 and float16 accumulate in int32, uint32 and float32 (no GPU has atomics for them); integer
    results are exact (wrapping around as NumPy's do), float results depend on the order of the additions.
    """
    x, index, src = memory.contiguous_input(x, "x"), index_input(index, "index"), memory.contiguous_input(src, "src")
    axis = _check_index_args(x, index, axis, src)
    return _scatter_add(x, index, src, axis)


@dispatch(reference=scatter_add_reference)
def _scatter_add(x: Any, index: Any, src: Any, axis: int) -> Any:
    acc = cast(x, accumulate_dtype(x.dtype))
    strides, axis_stride = _strides_off_axis(x.shape, axis)
    index_args.launch(
        scatter_add_kernel,
        index.size,
        flat_view(acc),
        strides,
        axis_stride,
        flat_view(index),
        tuple(index.shape),
        flat_view(src),
        contiguous_strides(src.shape),
    )
    return acc if acc.dtype == x.dtype else cast(acc, x.dtype)


def scatter_nd(indices: Any, updates: Any, shape: Sequence[int]) -> Any:
    """TensorFlow's ``scatter_nd``: ``zeros(shape)`` with ``out[indices[b]] += updates[b]`` for every ``b``.

    ``indices`` has shape ``(..., K)``: each row names a position in the first ``K`` dimensions of ``shape``,
    and ``updates`` has shape ``indices.shape[:-1] + shape[K:]``. Duplicate rows add up.
    """
    indices, updates = index_input(indices, "indices"), memory.contiguous_input(updates, "updates")
    shape = tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"shape: dimensions must be >= 0, got {shape}")
    indices_shape = tuple(indices.shape)
    if indices.ndim == 0 or indices_shape[-1] > len(shape):
        raise ValueError(
            f"indices: expected shape (..., K) with K <= len(shape)={len(shape)}, got {tuple(indices.shape)}"
        )
    depth = indices_shape[-1]
    expected = indices_shape[:-1] + shape[depth:]
    if tuple(updates.shape) != expected:
        raise ValueError(
            f"updates: expected shape indices.shape[:-1] + shape[K:] = {expected}, got {tuple(updates.shape)}"
        )
    host = memory.to_host(indices)
    for k in range(depth):
        check_indices(host[..., k], shape[k], f"indices[..., {k}]")
    return _scatter_nd(indices, updates, shape)


@dispatch(reference=scatter_nd_reference)
def _scatter_nd(indices: Any, updates: Any, shape: tuple[int, ...]) -> Any:
    depth = tuple(indices.shape)[-1]
    acc = memory.zeros(shape, accumulate_dtype(updates.dtype))
    # A trailing 1 keeps the strides tuple non-empty for scalar results.
    strides = contiguous_strides(shape) + (1,)
    index_args.launch(
        scatter_nd_kernel,
        updates.size,
        flat_view(indices),
        depth,
        strides,
        flat_view(updates),
        size_of(shape[depth:]),
        flat_view(acc),
    )
    return acc if acc.dtype == updates.dtype else cast(acc, updates.dtype)
