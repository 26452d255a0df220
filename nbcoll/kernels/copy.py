"""Data movement: contiguous copy, strided gather, dtype cast, and packing arrays into one flat buffer.

Every kernel here gives one thread one destination element; they differ only in where that element is read::

    copy:                for i: dst[i] = src[i]
    strided_copy_into:   for i: dst[i] = storage[base + offset_of(i, src.shape, src.strides)]
    cast_into:           for i: dst[i] = convert(src[i])

:func:`flatten` and :func:`unflatten` pack several arrays into one buffer and back, as gradient buckets do before
and after an all-reduce. Many small copies in one launch, driven by a table of descriptors, are
:func:`~nbcoll.kernels.batched_copy.batched_copy` (importable from here too).

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import copy
    >>> x = nbcoll.to_device(np.arange(8, dtype=np.float32).reshape(2, 4))
    >>> y = copy.strided_copy(x[:, 1:3])            # a contiguous copy of a column slice
    >>> nbcoll.to_host(y)
    array([[1., 2.],
           [5., 6.]], dtype=float32)
    >>> copy.cast(y, "float16").dtype
    dtype('float16')
    >>> w, b = y, nbcoll.to_device(np.array([9.0], np.float32))
    >>> flat = copy.flatten([w, b])                 # w and b, one after the other
    >>> nbcoll.to_host(flat)
    array([1., 2., 5., 6., 9.], dtype=float32)
    >>> [a.shape for a in copy.unflatten(flat, [w, b])]     # and back
    [(2, 2), (1,)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import backend, memory
from nbcoll.kernels.batched_copy import (  # noqa: F401  (importable from here as before)
    CopyDescriptors,
    batched_copy,
    batched_copy_reference,
)
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view, launch_1d, offset_of_device, size_of
from nbcoll.kernels.registry import register

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def copy_reference(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``dst[...] = src``: NumPy already walks any strides."""
    dst[...] = src
    return dst


def cast_reference(src: np.ndarray, dtype: Any) -> np.ndarray:
    """``src.astype(dtype)``: round to nearest for floats, truncation toward zero float to integer, wrap-around
    integer to integer."""
    with np.errstate(all="ignore"):
        return src.astype(dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels.


@register(
    "void(float32[::1], float32[::1])",
    "void(uint64[::1], uint64[::1])",
    "void(float16[::1], float64[::1])",
    "void(float32[::1], float16[::1])",
    "void(int8[::1], float32[::1])",
    "void(float32[::1], int64[::1])",
    "void(boolean[::1], float32[::1])",
)
@cuda.jit
def copy_kernel(dst, src):
    # One thread moves one element; when the dtypes differ the assignment converts it (cast uses this kernel).
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i]


@register(
    "void(float32[::1], float32[::1], int64, UniTuple(int64, 2), UniTuple(int64, 2))",
    "void(float16[::1], float16[::1], int64, UniTuple(int64, 1), UniTuple(int64, 1))",
    "void(int8[::1], int8[::1], int64, UniTuple(int64, 3), UniTuple(int64, 3))",
    "void(uint64[::1], uint64[::1], int64, UniTuple(int64, 2), UniTuple(int64, 2))",
)
@cuda.jit
def strided_copy_kernel(dst, storage, base, shape, strides):
    # One thread gathers one element: the i-th in row-major order, wherever the strides put it in storage.
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = storage[base + offset_of_device(i, shape, strides)]


# ---------------------------------------------------------------------------------------------------------------
# Launch functions: check the arguments, then run the kernel or, on the numpy backend, the reference.


def _device(x: Any, arg: str, allow_bool: bool = False) -> Any:
    x = memory.as_device_array(x, arg)
    memory.check_dtype(x.dtype, f"{arg}.dtype", allow_bool=allow_bool)
    return x


def _check_same_dtype(dst: Any, src: Any) -> None:
    if dst.dtype != src.dtype:
        raise TypeError(
            f"dst: dtype must match src, got dst.dtype={dst.dtype} and src.dtype={src.dtype}; use cast_into to convert"
        )


def _check_same_shape(dst: Any, src: Any) -> None:
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(
            f"dst: shape must match src, got dst.shape={tuple(dst.shape)} and src.shape={tuple(src.shape)}"
        )


def copy(dst: Any, src: Any) -> Any:
    """``for i: dst[i] = src[i]`` for C-contiguous device arrays of one dtype and shape. Returns ``dst``.

    A kernel rather than a driver memcpy, so that it runs the same way on every backend.
    For a strided ``src`` use :func:`strided_copy_into`.
    """
    dst, src = (
        memory.contiguous_input(dst, "dst", allow_bool=True),
        memory.contiguous_input(src, "src", allow_bool=True),
    )
    _check_same_dtype(dst, src)
    _check_same_shape(dst, src)
    return copy_chunk(dst, src)


@dispatch(reference=copy_reference)
def copy_chunk(dst: Any, src: Any) -> Any:
    """``for i: dst[i] = src[i]`` on 1-D contiguous device arrays of one dtype and size, without checks.

    The launch the collectives make once per chunk, as :func:`nbcoll.kernels.combine.fold_into` is for folds: they
    check their buffers once, when the collective is called, and every chunk is a slice of those.
    """
    if dst.dtype in memory.WORD_DTYPES:  # bfloat16 and fp8: a kernel copies their words
        launch_1d(copy_kernel, dst.size, flat_view(memory.words(dst)), flat_view(memory.words(src)))
        return dst
    launch_1d(copy_kernel, dst.size, flat_view(dst), flat_view(src))
    return dst


def storage_view(x: Any, arg: str = "src") -> tuple[Any, int, tuple[int, ...]]:
    """The memory under a strided device array, seen flat: ``(storage, base, strides)``.

    ``storage`` is a contiguous 1-D device array over every element ``x`` can reach, ``base`` is the position of
    ``x[0, ..., 0]`` in it, and ``strides`` are ``x``'s strides in elements (negative ones step backwards from
    ``base``), so that ``x[idx] == storage[base + sum(idx[d] * strides[d])]``. On ``cuda`` negative strides are
    refused with a ``ValueError``: there a view's memory starts at its first element, so nothing lies before it.
    """
    itemsize = x.dtype.itemsize
    if any(s % itemsize for s in x.strides):
        raise ValueError(f"{arg}: strides {tuple(x.strides)} are not multiples of the item size {itemsize}")
    strides = tuple(int(s) // itemsize for s in x.strides)
    lowest = sum((n - 1) * s for n, s in zip(x.shape, strides, strict=True) if s < 0)
    highest = sum((n - 1) * s for n, s in zip(x.shape, strides, strict=True) if s > 0)
    span = highest - lowest + 1
    if backend.get_backend() == "cuda" and not isinstance(x, np.ndarray):
        if lowest < 0:
            raise ValueError(
                f"{arg}: negative strides {tuple(x.strides)} are not supported on the cuda backend; "
                "reverse the data with a kernel or copy it on the host first"
            )
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        storage = DeviceNDArray(shape=(span,), strides=(itemsize,), dtype=x.dtype, gpu_data=x.gpu_data)
        return storage, 0, strides
    # sim, numpy, and host arrays on every backend: a NumPy view that starts at the lowest address x reaches,
    # flipped where strides are negative.
    host = x if isinstance(x, np.ndarray) else x._ary
    forward = host[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in host.strides)]
    flat = np.lib.stride_tricks.as_strided(forward, shape=(span,), strides=(itemsize,))
    if isinstance(x, np.ndarray):
        return flat, -lowest, strides
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray(flat), -lowest, strides


def strided_copy_into(dst: Any, src: Any) -> Any:
    """``for i: dst[i] = src[i-th element in row-major order]``: gather any strided view into contiguous ``dst``.

    ``src`` may be any view (``x[::2]``, ``x[:, 1:3]``, a transpose); ``dst`` is C-contiguous with ``src``'s
    shape and dtype. Returns ``dst``. On ``cuda`` ``src`` may not have negative strides (see :func:`storage_view`).
    """
    dst, src = memory.contiguous_input(dst, "dst"), _device(src, "src")
    _check_same_dtype(dst, src)
    _check_same_shape(dst, src)
    return _strided_copy_into(dst, src)


@dispatch(reference=copy_reference)
def _strided_copy_into(dst: Any, src: Any) -> Any:
    n = size_of(src.shape)
    if n == 0:
        return dst
    storage, base, strides = storage_view(src)
    shape = tuple(int(d) for d in src.shape) or (1,)
    launch_1d(strided_copy_kernel, n, flat_view(dst), storage, base, shape, strides or (0,))
    return dst


def strided_copy(src: Any) -> Any:
    """A new C-contiguous device array with the elements of the strided view ``src``."""
    src = _device(src, "src")
    return strided_copy_into(memory.empty(tuple(src.shape), src.dtype), src)


def contiguous(x: Any) -> Any:
    """``x`` itself when it is C-contiguous, else :func:`strided_copy` of it: what a kernel or a send can take."""
    return x if memory.is_contiguous(x) else strided_copy(x)


def cast_into(dst: Any, src: Any) -> Any:
    """``for i: dst[i] = dst.dtype(src[i])``, NumPy's ``astype`` for values that fit. Returns ``dst``.

    Floats round to nearest when narrowed and truncate toward zero when converted to integers; integers wrap
    around when narrowed to a smaller integer type, on every backend. Out of range, it is undefined, as in C:
    a float too large for a float16 becomes inf, but a float that no integer of the target type can hold
    (including NaN, inf and a negative value into an unsigned type) gives whatever the hardware gives: the GPU
    saturates, NumPy on a CPU usually returns the smallest integer. Do not rely on either.
    """
    dst, src = (
        memory.contiguous_input(dst, "dst", allow_bool=True),
        memory.contiguous_input(src, "src", allow_bool=True),
    )
    _check_same_shape(dst, src)
    return _cast_into(dst, src)


def _cast_into_reference(dst: Any, src: Any) -> Any:
    dst[...] = cast_reference(src, dst.dtype)
    return dst


@dispatch(reference=_cast_into_reference)
def _cast_into(dst: Any, src: Any) -> Any:
    if dst.size == 0:
        return dst
    if _keeps_low_bytes(src.dtype, dst.dtype):
        # Narrowing an integer, or changing its signedness, keeps its low-order bytes (int32 300 -> int8 44).
        # Reading those bytes as the target type gives that result on every backend, where an assignment in the
        # simulator would refuse the out-of-range value. GPUs are little-endian: the low bytes come first.
        ratio = src.dtype.itemsize // dst.dtype.itemsize
        strided_copy_into(flat_view(dst), flat_view(src).view(dst.dtype)[::ratio])
        return dst
    if src.dtype == np.float16 and dst.dtype.kind in "iu":
        # numba-cuda converts a float16 to an integer with cvt.rni, rounding to nearest (3.75 -> 4), where C and
        # NumPy truncate toward zero. float32 holds every float16 exactly, and its conversion truncates.
        wide = memory.empty(tuple(src.shape), np.float32)
        launch_1d(copy_kernel, wide.size, flat_view(wide), flat_view(src))
        src = wide
    launch_1d(copy_kernel, dst.size, flat_view(dst), flat_view(src))
    return dst


def _keeps_low_bytes(src: np.dtype, dst: np.dtype) -> bool:
    return src.kind in "iu" and dst.kind in "iu" and src != dst and dst.itemsize <= src.itemsize


def cast(src: Any, dtype: Any) -> Any:
    """A new device array with ``src``'s values converted to ``dtype`` (see :func:`cast_into`)."""
    src = memory.contiguous_input(src, "src", allow_bool=True)
    dtype = memory.check_dtype(dtype, "dtype", allow_bool=True)
    return cast_into(memory.empty(tuple(src.shape), dtype), src)


def _check_pieces(arrays: Sequence[Any], dtype: Any) -> list[Any]:
    pieces = []
    for k, x in enumerate(arrays):
        x = memory.contiguous_input(x, f"arrays[{k}]")
        if dtype is not None and x.dtype != dtype:
            raise TypeError(f"arrays[{k}]: dtype must be {dtype} like the others, got {x.dtype}")
        dtype = x.dtype
        pieces.append(x)
    return pieces


def _check_flat(flat: Any, pieces: Sequence[Any], arg: str) -> Any:
    flat = memory.contiguous_input(flat, arg)
    total = sum(x.size for x in pieces)
    if flat.ndim != 1 or flat.size != total:
        raise ValueError(
            f"{arg}: expected a 1-D array of {total} elements (the arrays' sizes), got {tuple(flat.shape)}"
        )
    if pieces and flat.dtype != pieces[0].dtype:
        raise TypeError(f"{arg}: dtype must match the arrays', got {flat.dtype} and {pieces[0].dtype}")
    return flat


def flatten(arrays: Sequence[Any], out: Any = None) -> Any:
    """Concatenate C-contiguous device arrays of one dtype into one 1-D array (``out``, or a new one).

    ``out[offset_k : offset_k + arrays[k].size] = arrays[k].ravel()`` with ``offset_k`` the sum of the sizes
    before ``k``. Separate allocations cannot be one flat source, so this is one :func:`copy` launch per array.
    """
    pieces = _check_pieces(arrays, None)
    if out is None:
        if not pieces:
            raise ValueError("arrays: need at least one array (or out) to know the dtype")
        out = memory.empty(sum(x.size for x in pieces), pieces[0].dtype)
    out = _check_flat(out, pieces, "out")
    offset = 0
    for x in pieces:
        if x.size:
            copy(out[offset : offset + x.size], flat_view(x))
        offset += x.size
    return out


def unflatten(flat: Any, arrays: Sequence[Any]) -> list[Any]:
    """The inverse of :func:`flatten`: copy consecutive slices of ``flat`` back into each array, in place."""
    pieces = _check_pieces(arrays, None)
    flat = _check_flat(flat, pieces, "flat")
    offset = 0
    for x in pieces:
        if x.size:
            copy(flat_view(x), flat[offset : offset + x.size])
        offset += x.size
    return pieces
