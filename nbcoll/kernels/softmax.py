"""Softmax and log-softmax along one axis, and their backward passes: fused kernels, one block per row.

A *row* is the line of elements along ``axis``; for a contiguous ``x`` with ``inner`` elements after the axis,
row ``r`` starts at ``(r // inner) * axis_size * inner + r % inner`` and steps by ``inner``. One block owns a row
and does in one launch what NumPy does in several passes::

    m = max(x[row])                               # shared-memory tree: the max is subtracted, so exp never
    s = sum(exp(x[row] - m))                      #   overflows (numerically stable softmax)
    softmax:      y[row] = exp(x[row] - m) / s
    log_softmax:  y[row] = x[row] - m - log(s)

    softmax backward:      dx = y * (dy - sum(dy * y))
    log_softmax backward:  dx = dy - exp(y) * sum(dy)        (y is the log_softmax output)

float16 computes in float32; floats only.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels.softmax import softmax, log_softmax, log_softmax_backward
    >>> logits = nbcoll.to_device(np.log(np.array([[1.0, 1.0, 2.0]], np.float32)))
    >>> nbcoll.to_host(softmax(logits))                          # over the last axis
    array([[0.25, 0.25, 0.5 ]], dtype=float32)
    >>> logp = log_softmax(logits, axis=1)
    >>> dlogp = nbcoll.to_device(np.array([[0.0, 0.0, 1.0]], np.float32))
    >>> nbcoll.to_host(log_softmax_backward(logp, dlogp, axis=1))    # dlogp - softmax * sum(dlogp)
    array([[-0.25, -0.25,  0.5 ]], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.block_reduce import block_max, block_sum
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view
from nbcoll.kernels.registry import register

THREADS = 256
"""Most threads of the block that owns one row; the shared scratch has one slot per thread."""

# ---------------------------------------------------------------------------------------------------------------
# NumPy references, computed in float32 for float16 as the kernels do.


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def softmax_reference(x: np.ndarray, axis: int = -1, log: bool = False) -> np.ndarray:
    """``y = exp(x - max) / sum(exp(x - max))`` along ``axis`` (or its log, ``x - max - log(sum)``)."""
    if x.size == 0:
        return x.copy()
    xs = x.astype(_compute_dtype(x.dtype))
    shifted = xs - xs.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    y = shifted - np.log(total) if log else np.exp(shifted) / total
    return np.ascontiguousarray(y.astype(x.dtype))


def softmax_backward_reference(y: np.ndarray, dy: np.ndarray, axis: int = -1, log: bool = False) -> np.ndarray:
    """``dx = y * (dy - sum(dy * y))``, or for log-softmax ``dx = dy - exp(y) * sum(dy)``, along ``axis``."""
    if y.size == 0:
        return dy.copy()
    ys, dys = y.astype(_compute_dtype(y.dtype)), dy.astype(_compute_dtype(y.dtype))
    if log:
        dx = dys - np.exp(ys) * dys.sum(axis=axis, keepdims=True)
    else:
        dx = ys * (dys - (dys * ys).sum(axis=axis, keepdims=True))
    return np.ascontiguousarray(dx.astype(y.dtype))


# ---------------------------------------------------------------------------------------------------------------
# Kernels, one pair per compute type (float32 serves float16 and float32).

_SIGNATURE_DTYPES = {"float32": ("float32", "float16"), "float64": ("float64",)}


def _make_forward_kernel(compute_name: str) -> Any:
    compute = numba.from_dtype(np.dtype(compute_name))

    @cuda.jit
    def softmax_kernel(x, y, axis_size, inner, log_output):
        # Block b owns row b; thread t handles the row's elements t, t + blockDim, t + 2*blockDim, ...
        scratch = cuda.shared.array(THREADS, compute)
        tid = cuda.threadIdx.x
        row = cuda.blockIdx.x
        base = (row // inner) * axis_size * inner + row % inner
        local_max = compute(-math.inf)
        for j in range(tid, axis_size, cuda.blockDim.x):
            value = compute(x[base + j * inner])
            if value > local_max:
                local_max = value
        row_max = block_max(scratch, local_max)
        local_sum = compute(0)
        for j in range(tid, axis_size, cuda.blockDim.x):
            local_sum += math.exp(compute(x[base + j * inner]) - row_max)
        total = block_sum(scratch, local_sum)
        log_total = math.log(total)
        for j in range(tid, axis_size, cuda.blockDim.x):
            shifted = compute(x[base + j * inner]) - row_max
            if log_output:
                y[base + j * inner] = shifted - log_total
            else:
                y[base + j * inner] = math.exp(shifted) / total

    softmax_kernel.py_func.__name__ = softmax_kernel.py_func.__qualname__ = f"softmax_{compute_name}"
    signatures = [f"void({t}[::1], {t}[::1], int64, int64, boolean)" for t in _SIGNATURE_DTYPES[compute_name]]
    return register(*signatures, name=f"kernels.softmax.softmax_{compute_name}")(softmax_kernel)


def _make_backward_kernel(compute_name: str) -> Any:
    compute = numba.from_dtype(np.dtype(compute_name))

    @cuda.jit
    def softmax_backward_kernel(y, dy, dx, axis_size, inner, from_log):
        # Block b owns row b: one block-wide sum, then each thread writes its elements of dx.
        scratch = cuda.shared.array(THREADS, compute)
        tid = cuda.threadIdx.x
        row = cuda.blockIdx.x
        base = (row // inner) * axis_size * inner + row % inner
        local_sum = compute(0)
        for j in range(tid, axis_size, cuda.blockDim.x):
            if from_log:
                local_sum += compute(dy[base + j * inner])
            else:
                local_sum += compute(dy[base + j * inner]) * compute(y[base + j * inner])
        total = block_sum(scratch, local_sum)
        for j in range(tid, axis_size, cuda.blockDim.x):
            at = base + j * inner
            if from_log:
                dx[at] = compute(dy[at]) - math.exp(compute(y[at])) * total
            else:
                dx[at] = compute(y[at]) * (compute(dy[at]) - total)

    softmax_backward_kernel.py_func.__name__ = f"softmax_backward_{compute_name}"
    softmax_backward_kernel.py_func.__qualname__ = softmax_backward_kernel.py_func.__name__
    signatures = [f"void({t}[::1], {t}[::1], {t}[::1], int64, int64, boolean)" for t in _SIGNATURE_DTYPES[compute_name]]
    return register(*signatures, name=f"kernels.softmax.softmax_backward_{compute_name}")(softmax_backward_kernel)


FORWARD_KERNELS = {name: _make_forward_kernel(name) for name in _SIGNATURE_DTYPES}
BACKWARD_KERNELS = {name: _make_backward_kernel(name) for name in _SIGNATURE_DTYPES}

# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _float_input(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    memory.check_dtype(x.dtype, f"{arg}.dtype")
    if x.dtype.kind != "f":
        raise TypeError(f"{arg}.dtype: softmax needs a floating dtype (float16/32/64), got {x.dtype}")
    memory.require_contiguous(x, arg)
    return x


def _axis(axis: Any, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an int, got {axis!r}")
    if not -ndim <= int(axis) < ndim:
        raise ValueError(f"axis: {int(axis)} is out of range for an array of {ndim} dimensions")
    return int(axis) % ndim


def _rows(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(number of rows, elements per row, elements after the axis) of a contiguous array."""
    axis_size = shape[axis]
    inner = math.prod(shape[axis + 1 :])
    rows = math.prod(shape) // axis_size if axis_size else 0
    return rows, axis_size, inner


def _threads(axis_size: int) -> int:
    return min(THREADS, 1 << max(axis_size - 1, 0).bit_length())


def _forward(x: Any, axis: int, log: bool) -> Any:
    x = _float_input(x, "x")
    if x.ndim == 0:
        raise ValueError("x: softmax needs at least one dimension, got a 0-d array")
    return _softmax(x, _axis(axis, x.ndim), log)


@dispatch(reference=softmax_reference)
def _softmax(x: Any, axis: int, log: bool) -> Any:
    shape = tuple(int(s) for s in x.shape)
    y = memory.empty(shape, x.dtype)
    rows, axis_size, inner = _rows(shape, axis)
    if rows:
        kernel = FORWARD_KERNELS[_compute_dtype(x.dtype).name]
        kernel[rows, _threads(axis_size)](flat_view(x), flat_view(y), axis_size, inner, log)
    return y


def _backward(y: Any, dy: Any, axis: int, log: bool) -> Any:
    y, dy = _float_input(y, "y"), _float_input(dy, "dy")
    if tuple(y.shape) != tuple(dy.shape):
        raise ValueError(f"y, dy: shapes must match, got y.shape={tuple(y.shape)} and dy.shape={tuple(dy.shape)}")
    if y.dtype != dy.dtype:
        raise TypeError(f"y, dy: dtypes must match, got y.dtype={y.dtype} and dy.dtype={dy.dtype}")
    if y.ndim == 0:
        raise ValueError("y: softmax needs at least one dimension, got a 0-d array")
    return _softmax_backward(y, dy, _axis(axis, y.ndim), log)


@dispatch(reference=softmax_backward_reference)
def _softmax_backward(y: Any, dy: Any, axis: int, log: bool) -> Any:
    shape = tuple(int(s) for s in y.shape)
    dx = memory.empty(shape, y.dtype)
    rows, axis_size, inner = _rows(shape, axis)
    if rows:
        kernel = BACKWARD_KERNELS[_compute_dtype(y.dtype).name]
        kernel[rows, _threads(axis_size)](flat_view(y), flat_view(dy), flat_view(dx), axis_size, inner, log)
    return dx


def softmax(x: Any, axis: int = -1) -> Any:
    """``y[row] = exp(x[row] - max(x[row])) / sum(exp(x[row] - max(x[row])))`` for every row along ``axis``."""
    return _forward(x, axis, log=False)


def log_softmax(x: Any, axis: int = -1) -> Any:
    """``y[row] = x[row] - max(x[row]) - log(sum(exp(x[row] - max(x[row]))))`` for every row along ``axis``."""
    return _forward(x, axis, log=True)


def softmax_backward(y: Any, dy: Any, axis: int = -1) -> Any:
    """Gradient of :func:`softmax` from its output ``y``: ``dx[row] = y[row] * (dy[row] - sum(dy[row] * y[row]))``."""
    return _backward(y, dy, axis, log=False)


def log_softmax_backward(y: Any, dy: Any, axis: int = -1) -> Any:
    """Gradient of :func:`log_softmax` from its output ``y``: ``dx[row] = dy[row] - exp(y[row]) * sum(dy[row])``."""
    return _backward(y, dy, axis, log=True)
