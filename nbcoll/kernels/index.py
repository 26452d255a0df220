"""Gather and scatter: reading from, and writing to, positions that another array names.

::

    gather(x, index, axis=0):        for i, j: out[i][j] = x[index[i][j]][j]
    scatter(x, index, src, axis=0):  out = copy(x);  for i, j: out[index[i][j]][j] = src[i][j]
    scatter_add(x, index, src, 0):   out = copy(x);  for i, j: out[index[i][j]][j] += src[i][j]
    scatter_nd(indices, updates, shape):   out = zeros(shape);  for b: out[indices[b]] += updates[b]
    index_select(x, axis, index):    np.take(x, index, axis)
    embedding(weight, ids):          for r: out[r] = weight[ids[r]]
    embedding_backward(grad_out, ids, num_embeddings):  dweight = zeros;  for r: dweight[ids[r]] += grad_out[r]

Gather is the easy direction: every thread writes its own output element and only *reads* from a computed
place. Scatter is the hard one: two threads whose indices are equal write the same element, and nothing orders
them. ``scatter`` accepts that (one of the writers wins, which one is not defined); the ``*_add`` operations make
every write an atomic read-modify-write (``cuda.atomic.add``), so duplicates add up. GPUs have no atomic add for
8-bit integers and float16, so those accumulate in a wider type (int32, uint32, float32) and are cast back at the
end; integer sums wrap around exactly as NumPy's do.

Every index is checked on the host before any kernel runs: an index out of range raises ``IndexError`` naming the
argument and the bad value, instead of a kernel reading or writing outside an array.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import index
    >>> weight = nbcoll.to_device(np.arange(6, dtype=np.float32).reshape(3, 2))    # V=3 rows of D=2
    >>> ids = nbcoll.to_device(np.array([[2, 0, 2]]))                               # B=1, T=3
    >>> rows = index.embedding(weight, ids)                                         # (B, T, D)
    >>> nbcoll.to_host(rows)
    array([[[4., 5.],
            [0., 1.],
            [4., 5.]]], dtype=float32)
    >>> grad_rows = nbcoll.to_device(np.ones((1, 3, 2), np.float32))
    >>> nbcoll.to_host(index.embedding_backward(grad_rows, ids, 3))    # row 2 was used twice: its gradients sum
    array([[1., 1.],
           [0., 0.],
           [2., 2.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import cuda, int64

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import contiguous_strides, flat_view, launch_1d, offset_of_device, size_of
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


def index_select_reference(x: np.ndarray, axis: int, index: np.ndarray) -> np.ndarray:
    """``np.take(x, index, axis)``."""
    return np.take(x, index.astype(np.int64), axis=axis)


def embedding_reference(weight: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``out[r] = weight[ids[r]]`` for every position ``r`` of ``ids``."""
    return weight[ids.astype(np.int64)]


def embedding_backward_reference(grad_out: np.ndarray, ids: np.ndarray, num_embeddings: int) -> np.ndarray:
    """``dweight = zeros; dweight[ids[r]] += grad_out[r]``, duplicate ids summed."""
    dim = tuple(grad_out.shape)[-1]
    dweight = np.zeros((num_embeddings, dim), accumulate_dtype(grad_out.dtype))
    np.add.at(dweight, ids.reshape(-1).astype(np.int64), grad_out.reshape(-1, dim))
    return dweight.astype(grad_out.dtype)


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


@register(
    "void(float32[::1], int64, int64[::1], int64, float32[::1])",
    "void(uint8[::1], int64, int32[::1], int64, uint8[::1])",
)
@cuda.jit
def index_select_kernel(x, axis_size, index, inner, out):
    # One thread copies one output element; x is seen as (outer, axis_size, inner), out as (outer, len(index),
    # inner), and negative indices count from the end as in NumPy.
    i = cuda.grid(1)
    if i < out.size:
        picked = index.size
        outer = i // (picked * inner)
        k = int64(index[(i // inner) % picked])
        if k < 0:
            k += axis_size
        out[i] = x[(outer * axis_size + k) * inner + i % inner]


@register(
    "void(float32[::1], int64[::1], int64, float32[::1])",
    "void(float16[::1], int32[::1], int64, float16[::1])",
)
@cuda.jit
def embedding_kernel(weight, ids, dim, out):
    # One thread copies one element of one looked-up row: out is (len(ids), dim), weight (rows, dim).
    i = cuda.grid(1)
    if i < out.size:
        out[i] = weight[int64(ids[i // dim]) * dim + i % dim]


@register(
    "void(float32[::1], int64[::1], int64, float32[::1])",
    "void(float16[::1], int32[::1], int64, float32[::1])",
    "void(int64[::1], uint8[::1], int64, int64[::1])",
)
@cuda.jit
def embedding_backward_kernel(grad_out, ids, dim, acc):
    # One thread adds one gradient element into the row its id names; repeated ids meet in the atomic add.
    i = cuda.grid(1)
    if i < grad_out.size:
        cuda.atomic.add(acc, int64(ids[i // dim]) * dim + i % dim, grad_out[i])


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


# ---------------------------------------------------------------------------------------------------------------
# Argument checks and the helpers every launch function shares.


def _launch(kernel: Any, n: int, *args: Any) -> None:
    """The one place kernels are started (tests replace it to prove that bad indices never reach a kernel)."""
    launch_1d(kernel, n, *args)


def _input(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    memory.check_dtype(x.dtype, f"{arg}.dtype")
    memory.require_contiguous(x, arg)
    return x


def _index_input(index: Any, arg: str) -> Any:
    index = memory.as_device_array(index, arg)
    if np.dtype(index.dtype).kind not in "iu":
        raise TypeError(f"{arg}.dtype: indices must have an integer dtype, got {index.dtype}")
    memory.require_contiguous(index, arg)
    return index


def _axis(axis: int, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis: expected an int in [{-ndim}, {ndim}) for a {ndim}-d array, got {axis!r}")
    return int(axis) % ndim


def check_indices(index: Any, size: int, arg: str, allow_negative: bool = False) -> None:
    """Raise ``IndexError`` naming ``arg`` and the first bad value unless every index is in ``[0, size)``.

    With ``allow_negative`` (NumPy's ``take``), ``[-size, size)`` is accepted instead.
    """
    host = memory.to_host(index)
    if host.size == 0:
        return
    low = -size if allow_negative else 0
    values = host.astype(np.int64) if host.dtype != np.uint64 else host
    bad = (values < low) | (values >= size) if host.dtype != np.uint64 else values >= np.uint64(size)
    if bad.any():
        position = tuple(int(p) for p in np.argwhere(bad)[0])
        raise IndexError(
            f"{arg}: index {host[position]} at position {position} is out of range [{low}, {size}) "
            f"(found {int(bad.sum())} bad value(s))"
        )


def _copy(x: Any, dtype: np.dtype) -> Any:
    """A new device array with the values of ``x`` in ``dtype``."""
    out = memory.empty(tuple(x.shape), dtype)
    if x.size == 0:
        return out
    if x.dtype == dtype:
        out.copy_to_device(x)
    elif dtype.kind in "iu" and dtype.itemsize == 1:
        _launch(wrap_to_8_bits_kernel, x.size, flat_view(x), np.int64(np.iinfo(dtype).min), flat_view(out))
    else:
        _launch(convert_kernel, x.size, flat_view(x), flat_view(out))
    return out


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
    axis = _axis(axis, x.ndim)
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
    x, index = _input(x, "x"), _index_input(index, "index")
    axis = _check_index_args(x, index, axis, None)
    return _gather(x, index, axis)


@dispatch(reference=gather_reference)
def _gather(x: Any, index: Any, axis: int) -> Any:
    out = memory.empty(tuple(index.shape), x.dtype)
    strides, axis_stride = _strides_off_axis(x.shape, axis)
    _launch(
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
    x, index, src = _input(x, "x"), _index_input(index, "index"), _input(src, "src")
    axis = _check_index_args(x, index, axis, src)
    return _scatter(x, index, src, axis)


@dispatch(reference=scatter_reference)
def _scatter(x: Any, index: Any, src: Any, axis: int) -> Any:
    out = _copy(x, x.dtype)
    strides, axis_stride = _strides_off_axis(x.shape, axis)
    _launch(
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
    x, index, src = _input(x, "x"), _index_input(index, "index"), _input(src, "src")
    axis = _check_index_args(x, index, axis, src)
    return _scatter_add(x, index, src, axis)


@dispatch(reference=scatter_add_reference)
def _scatter_add(x: Any, index: Any, src: Any, axis: int) -> Any:
    acc = _copy(x, accumulate_dtype(x.dtype))
    strides, axis_stride = _strides_off_axis(x.shape, axis)
    _launch(
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
    return acc if acc.dtype == x.dtype else _copy(acc, x.dtype)


def scatter_nd(indices: Any, updates: Any, shape: Sequence[int]) -> Any:
    """TensorFlow's ``scatter_nd``: ``zeros(shape)`` with ``out[indices[b]] += updates[b]`` for every ``b``.

    ``indices`` has shape ``(..., K)``: each row names a position in the first ``K`` dimensions of ``shape``,
    and ``updates`` has shape ``indices.shape[:-1] + shape[K:]``. Duplicate rows add up.
    """
    indices, updates = _index_input(indices, "indices"), _input(updates, "updates")
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
    _launch(
        scatter_nd_kernel,
        updates.size,
        flat_view(indices),
        depth,
        strides,
        flat_view(updates),
        size_of(shape[depth:]),
        flat_view(acc),
    )
    return acc if acc.dtype == updates.dtype else _copy(acc, updates.dtype)


def index_select(x: Any, axis: int, index: Any) -> Any:
    """``np.take(x, index, axis)`` for a 1-D ``index``; negative indices count from the end."""
    x, index = _input(x, "x"), _index_input(index, "index")
    if x.ndim == 0:
        raise ValueError("x: index_select needs at least one dimension, got a 0-d array")
    axis = _axis(axis, x.ndim)
    if index.ndim != 1:
        raise ValueError(f"index: must be 1-D, got shape {tuple(index.shape)}")
    check_indices(index, x.shape[axis], "index", allow_negative=True)
    return _index_select(x, axis, index)


@dispatch(reference=index_select_reference)
def _index_select(x: Any, axis: int, index: Any) -> Any:
    shape = tuple(x.shape[:axis]) + (index.size,) + tuple(x.shape[axis + 1 :])
    out = memory.empty(shape, x.dtype)
    inner = size_of(x.shape[axis + 1 :])
    _launch(index_select_kernel, out.size, flat_view(x), x.shape[axis], flat_view(index), inner, flat_view(out))
    return out


def embedding(weight: Any, ids: Any) -> Any:
    """``weight[ids]``: for every position of ``ids`` (any shape), the row of ``weight`` (V, D) it names."""
    weight, ids = _input(weight, "weight"), _index_input(ids, "ids")
    if weight.ndim != 2:
        raise ValueError(f"weight: expected shape (num_embeddings, dim), got {tuple(weight.shape)}")
    check_indices(ids, weight.shape[0], "ids")
    return _embedding(weight, ids)


@dispatch(reference=embedding_reference)
def _embedding(weight: Any, ids: Any) -> Any:
    dim = weight.shape[1]
    out = memory.empty(tuple(ids.shape) + (dim,), weight.dtype)
    _launch(embedding_kernel, out.size, flat_view(weight), flat_view(ids), dim, flat_view(out))
    return out


def embedding_backward(grad_out: Any, ids: Any, num_embeddings: int) -> Any:
    """The gradient of :func:`embedding` for its weight: ``dweight[ids[r]] += grad_out[r]``, shape (V, D).

    Rows that appear several times in ``ids`` receive the sum of their gradients (atomic adds).
    """
    grad_out, ids = _input(grad_out, "grad_out"), _index_input(ids, "ids")
    grad_shape = tuple(grad_out.shape)
    if grad_out.ndim != ids.ndim + 1 or grad_shape[:-1] != tuple(ids.shape):
        raise ValueError(
            f"grad_out: expected shape ids.shape + (dim,) = {tuple(ids.shape)} + (dim,), got {tuple(grad_out.shape)}"
        )
    if int(num_embeddings) < 0:
        raise ValueError(f"num_embeddings: must be >= 0, got {num_embeddings}")
    check_indices(ids, int(num_embeddings), "ids")
    return _embedding_backward(grad_out, ids, int(num_embeddings))


@dispatch(reference=embedding_backward_reference)
def _embedding_backward(grad_out: Any, ids: Any, num_embeddings: int) -> Any:
    dim = tuple(grad_out.shape)[-1]
    acc = memory.zeros((num_embeddings, dim), accumulate_dtype(grad_out.dtype))
    _launch(embedding_backward_kernel, grad_out.size, flat_view(grad_out), flat_view(ids), dim, flat_view(acc))
    return acc if acc.dtype == grad_out.dtype else _copy(acc, grad_out.dtype)
