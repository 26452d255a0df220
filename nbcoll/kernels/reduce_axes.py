"""Reductions over chosen axes: sum, mean, max, min and argmax, with NumPy's ``axis`` and ``keepdims``.

The axes of ``x`` split into *kept* axes (they index the output) and *reduced* axes (they are folded away)::

    for o in output:                                  # one row of threads per output element
        out[o] = fold(op, [x[o, r] for r in reduced])  # the lanes of the row share the reduced elements

Each lane (a thread) folds a strided slice of the reduced elements into a register, writes it to shared memory,
and the row combines the partial values in a tree: 256 -> 128 -> ... -> 1, halving the active lanes at each
step. A block holds 256 threads: one row of 256 lanes for a long reduction, or many short rows (say 64 rows of 4
lanes) when each output has only a few elements, so that no thread idles. The kept and reduced axes can be
anywhere, so both offsets come from the ``offset_of`` helper with the strides of ``x``.

Result dtypes follow NumPy: ``sum`` of a signed integer gives int64 and of an unsigned integer uint64 (so that it
cannot overflow the narrow type); ``sum`` and ``mean`` of floats keep the dtype, float16 accumulating in float32;
``max`` and ``min`` keep the dtype and propagate NaN; ``argmax`` gives the int64 index of the first maximum
(the first NaN when there is one).

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels.reduce_axes import reduce, sum_to_shape
    >>> x = nbcoll.to_device(np.ones((4, 3, 5), np.float32))
    >>> nbcoll.to_host(reduce("sum", x, axis=(0, 2)))             # (4, 3, 5) -> (3,)
    array([20., 20., 20.], dtype=float32)
    >>> logits = nbcoll.to_device(np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]], np.float32))
    >>> nbcoll.to_host(reduce("argmax", logits, axis=-1))         # (batch, classes) -> (batch,) int64
    array([1, 0])
    >>> grad_y = nbcoll.to_device(np.ones((8, 5), np.float32))
    >>> nbcoll.to_host(sum_to_shape(grad_y, (1, 5)))              # undo broadcasting: (8, 5) -> (1, 5)
    array([[8., 8., 8., 8., 8.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.block_reduce import make_block_reduce, merge_values
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import contiguous_strides, flat_view, offset_of_device, size_of
from nbcoll.kernels.registry import register

THREADS = 256
"""Most threads of one reduction block; the shared-memory scratch has one slot per thread."""

OPS = ("sum", "mean", "max", "min", "argmax")

# ---------------------------------------------------------------------------------------------------------------
# Types: what each dtype accumulates in, and what each op returns.


def accumulator_dtype(dtype: np.dtype) -> np.dtype:
    """The type partial results are held in: float16 widens to float32, integers to 64 bits."""
    if dtype.kind == "f":
        return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
    return np.dtype(np.uint64) if dtype.kind == "u" else np.dtype(np.int64)


def result_dtype(op: str, dtype: np.dtype) -> np.dtype:
    """The dtype ``reduce(op, x)`` returns for an ``x`` of ``dtype`` (NumPy's choice)."""
    if op == "argmax":
        return np.dtype(np.int64)
    if op == "sum" and dtype.kind in "iu":
        return accumulator_dtype(dtype)
    return dtype


# ---------------------------------------------------------------------------------------------------------------
# NumPy reference.


def reduce_reference(op: str, x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """``out[o] = fold(op, x[o, :])`` over ``axis`` in NumPy, with the dtypes of :func:`result_dtype`."""
    acc = accumulator_dtype(x.dtype)
    with np.errstate(all="ignore"):
        if op == "sum":
            result = np.sum(x, axis=axis, dtype=acc, keepdims=keepdims)
        elif op == "mean":
            result = np.full(_out_shape(x.shape, _axes(axis, x.ndim), keepdims), np.nan, acc)
            if x.size:
                result = np.mean(x, axis=axis, dtype=acc, keepdims=keepdims)
        elif op == "max":
            result = np.max(x, axis=axis, keepdims=keepdims)
        elif op == "min":
            result = np.min(x, axis=axis, keepdims=keepdims)
        else:
            result = np.argmax(x, axis=axis, keepdims=keepdims)
    return np.array(result, dtype=result_dtype(op, x.dtype), order="C")


# ---------------------------------------------------------------------------------------------------------------
# Kernels. The combine rules are written once and compiled into one kernel per (op, accumulator type).


def _add(a, b):
    return a + b


def _max(a, b):
    # a != a is true only for NaN: a NaN on either side wins, as in NumPy.
    return a if (a >= b or a != a) else b


def _min(a, b):
    return a if (a <= b or a != a) else b


def _first_is_better(value, index, best_value, best_index):
    """True when ``(value, index)`` beats ``(best_value, best_index)`` for argmax: larger, or equal and earlier.

    NaN counts as the largest value, so the first NaN wins, as in NumPy.
    """
    if value != value:
        return best_value == best_value or index < best_index
    if best_value != best_value:
        return False
    return value > best_value or (value == best_value and index < best_index)


_first_is_better_device = cuda.jit(device=True)(_first_is_better)


def _merge_argmax(scratch, into, other):
    """Keep in slot ``into`` the better (value, index) pair of slots ``into`` and ``other``; ``scratch`` holds
    ``(values, indices)``, two shared arrays."""
    values, indices = scratch
    if _first_is_better_device(values[other], indices[other], values[into], indices[into]):
        values[into] = values[other]
        indices[into] = indices[other]


fold_argmax = make_block_reduce(_merge_argmax)

_COMBINE = {"sum": _add, "mean": _add, "max": _max, "min": _min}
_NUMBA_TYPES = {"float32": numba.float32, "float64": numba.float64, "int64": numba.int64, "uint64": numba.uint64}


def _signature(x_type: str, out_type: str, kept_ndim: int, reduced_ndim: int) -> str:
    kept, reduced = f"UniTuple(int64, {kept_ndim})", f"UniTuple(int64, {reduced_ndim})"
    return f"void({x_type}[::1], {out_type}[::1], {kept}, {kept}, {reduced}, {reduced}, int64)"


# Representative (x, out) dtypes for the PTX check, per accumulator type and op.
_SIGNATURE_TYPES = {
    ("sum", "float32"): [("float32", "float32"), ("float16", "float16")],
    ("sum", "float64"): [("float64", "float64")],
    ("sum", "int64"): [("int8", "int64"), ("int64", "int64")],
    ("sum", "uint64"): [("uint8", "uint64")],
    ("mean", "float32"): [("float32", "float32"), ("float16", "float16")],
    ("mean", "float64"): [("float64", "float64")],
    ("max", "float32"): [("float16", "float16")],
    ("max", "float64"): [("float64", "float64")],
    ("max", "int64"): [("int32", "int32")],
    ("max", "uint64"): [("uint64", "uint64")],
    ("argmax", "float32"): [("float32", "int64")],
    ("argmax", "float64"): [("float64", "int64")],
    ("argmax", "int64"): [("int8", "int64")],
    ("argmax", "uint64"): [("uint32", "int64")],
}


def _signatures(op: str, acc_name: str) -> list[str]:
    pairs = _SIGNATURE_TYPES[("max" if op == "min" else op, acc_name)]
    # One signature with two reduced axes checks the tuple-length generic offset code path too.
    extra = [_signature(pairs[0][0], pairs[0][1], 1, 2)] if op in ("sum", "argmax") else []
    return [_signature(x_type, out_type, 2, 1) for x_type, out_type in pairs] + extra


def _make_fold_kernel(op: str, acc_name: str) -> Any:
    acc_type = _NUMBA_TYPES[acc_name]
    combine = cuda.jit(device=True)(_COMBINE[op])
    fold = make_block_reduce(merge_values(_COMBINE[op]))
    divide_by_count = op == "mean"

    @cuda.jit
    def fold_kernel(x, out, kept_shape, kept_strides, reduced_shape, reduced_strides, reduced_count):
        # Thread (lane, row) folds reduced elements lane, lane + blockDim.x, ... of output `row` of this block.
        partial = cuda.shared.array(THREADS, acc_type)
        lane = cuda.threadIdx.x
        slot = cuda.threadIdx.y * cuda.blockDim.x + lane
        out_index = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
        has_output = out_index < out.size
        if has_output and lane < reduced_count:
            base = offset_of_device(out_index, kept_shape, kept_strides)
            acc = acc_type(x[base + offset_of_device(lane, reduced_shape, reduced_strides)])
            for r in range(lane + cuda.blockDim.x, reduced_count, cuda.blockDim.x):
                acc = combine(acc, acc_type(x[base + offset_of_device(r, reduced_shape, reduced_strides)]))
            partial[slot] = acc
        # Tree over the lanes of each row; only the first reduced_count lanes hold values, so no identity is needed.
        first = slot - lane
        fold(partial, first, lane, cuda.blockDim.x, reduced_count if has_output else 0)
        if has_output and lane == 0:
            if divide_by_count:
                out[out_index] = partial[first] / reduced_count
            else:
                out[out_index] = partial[first]

    fold_kernel.py_func.__name__ = fold_kernel.py_func.__qualname__ = f"{op}_{acc_name}_kernel"
    name = f"kernels.reduce_axes.{op}_{acc_name}_kernel"
    return register(*_signatures(op, acc_name), name=name)(fold_kernel)


def _make_argmax_kernel(acc_name: str) -> Any:
    acc_type = _NUMBA_TYPES[acc_name]

    @cuda.jit
    def argmax_kernel(x, out, kept_shape, kept_strides, reduced_shape, reduced_strides, reduced_count):
        # As fold_kernel, but each value travels with its index, so that the first maximum wins.
        best_values = cuda.shared.array(THREADS, acc_type)
        best_indices = cuda.shared.array(THREADS, numba.int64)
        lane = cuda.threadIdx.x
        slot = cuda.threadIdx.y * cuda.blockDim.x + lane
        out_index = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
        has_output = out_index < out.size
        if has_output and lane < reduced_count:
            base = offset_of_device(out_index, kept_shape, kept_strides)
            best = acc_type(x[base + offset_of_device(lane, reduced_shape, reduced_strides)])
            best_index = lane
            for r in range(lane + cuda.blockDim.x, reduced_count, cuda.blockDim.x):
                value = acc_type(x[base + offset_of_device(r, reduced_shape, reduced_strides)])
                if _first_is_better_device(value, r, best, best_index):
                    best, best_index = value, r
            best_values[slot] = best
            best_indices[slot] = best_index
        first = slot - lane
        fold_argmax((best_values, best_indices), first, lane, cuda.blockDim.x, reduced_count if has_output else 0)
        if has_output and lane == 0:
            out[out_index] = best_indices[first]

    argmax_kernel.py_func.__name__ = argmax_kernel.py_func.__qualname__ = f"argmax_{acc_name}_kernel"
    name = f"kernels.reduce_axes.argmax_{acc_name}_kernel"
    return register(*_signatures("argmax", acc_name), name=name)(argmax_kernel)


_ALL_ACCUMULATORS = ("float32", "float64", "int64", "uint64")
KERNELS: dict[tuple[str, str], Any] = {}
for _acc_name in _ALL_ACCUMULATORS:
    for _op in ("sum", "max", "min"):
        KERNELS[(_op, _acc_name)] = _make_fold_kernel(_op, _acc_name)
    KERNELS[("argmax", _acc_name)] = _make_argmax_kernel(_acc_name)
for _acc_name in ("float32", "float64"):
    KERNELS[("mean", _acc_name)] = _make_fold_kernel("mean", _acc_name)


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _axes(axis: Any, ndim: int, arg: str = "axis") -> tuple[int, ...]:
    """``axis`` as a sorted tuple of non-negative axes; ``None`` means all of them."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"{arg}: expected None, an int or a tuple of ints, got {axis!r}")
        if not -ndim <= int(item) < ndim:
            raise ValueError(f"{arg}: axis {int(item)} is out of range for an array of {ndim} dimensions")
        axes.append(int(item) % ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{arg}: repeated axis in {axis!r}")
    return tuple(sorted(axes))


def _out_shape(shape: Sequence[int], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else int(s) for d, s in enumerate(shape))
    return tuple(int(s) for d, s in enumerate(shape) if d not in axes)


def _split_axes(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[tuple, tuple, tuple, tuple]:
    """Shapes and element strides of the kept and of the reduced axes (each at least one axis long)."""
    strides = contiguous_strides(shape)
    kept = [d for d in range(len(shape)) if d not in axes]
    kept_shape = tuple(shape[d] for d in kept) or (1,)
    kept_strides = tuple(strides[d] for d in kept) or (0,)
    reduced_shape = tuple(shape[d] for d in axes) or (1,)
    reduced_strides = tuple(strides[d] for d in axes) or (0,)
    return kept_shape, kept_strides, reduced_shape, reduced_strides


def _filled(shape: tuple[int, ...], dtype: np.dtype, value: float) -> Any:
    # The simulator stores a 0-d array as shape (1,): give the result its shape () back.
    return memory.to_device(np.full(shape, value, dtype)).reshape(shape)


def reduce(op: str, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Reduce ``x`` over ``axis`` (None: all axes; an int; a tuple of ints; negatives count from the end).

    ``for o in kept positions: out[o] = fold(op, x[o, r] for r in reduced positions)``

    ``op`` is ``"sum"``, ``"mean"`` (floats only), ``"max"``, ``"min"`` or ``"argmax"`` (``axis`` None or one
    int; int64 index of the first maximum, flat when ``axis`` is None). An empty reduction gives 0 for sum and
    NaN for mean; max, min and argmax of an empty axis raise ``ValueError``.
    """
    if op not in OPS:
        raise ValueError(f"op: unknown reduction {op!r}; expected one of {', '.join(OPS)}")
    x = memory.as_device_array(x, "x")
    memory.check_dtype(x.dtype, "x.dtype")
    memory.require_contiguous(x, "x")
    if op == "mean" and x.dtype.kind != "f":
        raise TypeError(f"x.dtype: op 'mean' needs a floating dtype (float16/32/64), got {x.dtype}")
    if op == "argmax" and isinstance(axis, (tuple, list)):
        raise TypeError(f"axis: argmax takes None or one int, got {axis!r}")
    shape = tuple(int(s) for s in x.shape)
    axes = _axes(axis, len(shape))
    if size_of([shape[d] for d in axes]) == 0 and op in ("max", "min", "argmax"):
        raise ValueError(f"x: {op} over an empty axis (x.shape={shape}, axis={axis!r}) has no value")
    return _reduce(op, x, axis if op == "argmax" else axes, keepdims)


@dispatch(reference=reduce_reference)
def _reduce(op: str, x: Any, axis: Any, keepdims: bool) -> Any:
    shape = tuple(int(s) for s in x.shape)
    axes = _axes(axis, len(shape))
    out_shape = _out_shape(shape, axes, keepdims)
    reduced_count = size_of([shape[d] for d in axes])
    out_dtype = result_dtype(op, x.dtype)
    if reduced_count == 0:
        return _filled(out_shape, out_dtype, np.nan if op == "mean" else 0)
    out = memory.empty(out_shape, out_dtype)
    out_count = size_of(out_shape)
    if out_count == 0:
        return out
    kernel = KERNELS[(op, accumulator_dtype(x.dtype).name)]
    # Lanes (x) share one output's elements; rows (y) give small reductions several outputs per block.
    lanes = min(THREADS, 1 << (reduced_count - 1).bit_length())
    rows = min(THREADS // lanes, out_count)
    kernel[(out_count + rows - 1) // rows, (lanes, rows)](
        flat_view(x), flat_view(out), *_split_axes(shape, axes), reduced_count
    )
    return out


def sum_to_shape(x: Any, shape: Sequence[int]) -> Any:
    """Sum ``x`` down to ``shape``, undoing NumPy broadcasting: the gradient of ``broadcast_to(a, x.shape)``.

    ``shape`` must broadcast to ``x.shape``. Leading axes that ``shape`` lacks are summed away, and axes where
    ``shape`` has 1 and ``x`` has more are summed with ``keepdims``. Returns a new array of ``shape`` (a copy when
    there is nothing to sum), with the dtypes of ``reduce("sum", ...)``.
    """
    target = tuple(int(s) for s in shape)
    x = memory.as_device_array(x, "x")
    have = tuple(int(s) for s in x.shape)
    lead = len(have) - len(target)
    if lead < 0 or any(t not in (1, h) for t, h in zip(target, have[lead:], strict=True)):
        raise ValueError(f"shape: {target} does not broadcast to x.shape={have}; cannot sum x down to it")
    axes = tuple(range(lead)) + tuple(lead + d for d, t in enumerate(target) if t == 1 and have[lead + d] != 1)
    summed = reduce("sum", x, axis=axes, keepdims=True)
    return summed.reshape(target)
