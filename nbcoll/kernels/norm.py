"""Layer normalisation over the last axis, and its backward pass: one thread block per row.

::

    layer_norm(x, weight, bias, eps):   for each row r of x (D columns):
        mean[r] = sum_c x[r, c] / D
        rstd[r] = 1 / sqrt(sum_c (x[r, c] - mean[r])**2 / D + eps)
        y[r, c] = (x[r, c] - mean[r]) * rstd[r] * weight[c] + bias[c]

    layer_norm_backward(dy, x, mean, rstd, weight):   with xhat = (x - mean) * rstd and g = dy * weight,
        dx[r, c]   = rstd[r] * (g[r, c] - sum_c' g[r, c'] / D - xhat[r, c] * sum_c' g[r, c'] * xhat[r, c'] / D)
        dweight[c] = sum_r dy[r, c] * xhat[r, c]
        dbias[c]   = sum_r dy[r, c]

A row's statistics need every element of the row, so one block owns one row: its threads each sum a strided
part of the row, then combine their partial sums in shared memory by a tree reduction (half of the threads add
the other half's values, log2(BLOCK) times). The variance is a second pass over the row, after the mean is known,
which is more accurate than ``E[x**2] - E[x]**2``. Statistics are kept in float32 for float16 inputs (``mean``
and ``rstd`` are float32 then), and in the input's type otherwise.

Example::

    from nbcoll.kernels import norm
    y, mean, rstd = norm.layer_norm(x, weight, bias)
    dx, dweight, dbias = norm.layer_norm_backward(dy, x, mean, rstd, weight)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.block_reduce import fold_sum
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import blocks_for, size_of
from nbcoll.kernels.registry import register

BLOCK = 32
"""Threads per block (one warp), and the length of the shared-memory tree reduction: a power of two.

Each thread handles every BLOCK-th column, so any row length works. Long rows on a GPU would use 128 to 1024
threads per row; one warp keeps the simulator, which runs every thread in Python, quick."""


def statistics_dtype(dtype: np.dtype) -> np.dtype:
    """The type of ``mean``, ``rstd`` and every partial sum: float32 for float16 inputs, else the input's type."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


# ---------------------------------------------------------------------------------------------------------------
# NumPy references (on rows: every array reshaped to (rows, D)).


def layer_norm_reference(
    x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float = 1e-5
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    acc = statistics_dtype(x.dtype)
    n = acc.type(x.shape[-1])
    xa = x.astype(acc)
    mean = np.asarray(xa.sum(axis=-1) / n)
    centered = xa - mean[..., None]
    rstd = np.asarray(1 / np.sqrt((centered * centered).sum(axis=-1) / n + acc.type(eps)), acc)
    y = centered * rstd[..., None]
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype), mean, rstd


def layer_norm_backward_reference(
    dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, weight: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    acc = statistics_dtype(x.dtype)
    n = acc.type(x.shape[-1])
    dya = dy.astype(acc)
    xhat = (x.astype(acc) - mean[..., None]) * rstd[..., None]
    g = dya * weight if weight is not None else dya
    mean_g = g.sum(axis=-1, keepdims=True) / n
    mean_gx = (g * xhat).sum(axis=-1, keepdims=True) / n
    dx = rstd[..., None] * (g - mean_g - xhat * mean_gx)
    rows, dim = size_of(x.shape[:-1]), x.shape[-1]
    dweight = (dya * xhat).reshape(rows, dim).sum(axis=0)
    dbias = dya.reshape(rows, dim).sum(axis=0)
    return dx.astype(x.dtype), dweight.astype(x.dtype), dbias.astype(x.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels.


@register(
    "void(float32[:, ::1], float32[::1], float32[::1], float32, float32, float32[:, ::1], float32[::1], float32[::1])",
    "void(float16[:, ::1], float16[::1], float16[::1], float32, float32, float16[:, ::1], float32[::1], float32[::1])",
    "void(float64[:, ::1], float64[::1], float64[::1], float64, float64, float64[:, ::1], float64[::1], float64[::1])",
)
@cuda.jit
def layer_norm_kernel(x, weight, bias, eps, n, y, mean, rstd):
    # One block normalises one row. Each thread sums the columns t, t + BLOCK, ... into its slot of shared memory
    # (kept in the statistics type); fold_sum adds the slots into partial[0]. n = D as a float.
    row = cuda.blockIdx.x
    t = cuda.threadIdx.x
    dim = x.shape[1]
    partial = cuda.shared.array(BLOCK, mean.dtype)

    partial[t] = 0
    for c in range(t, dim, BLOCK):
        partial[t] += x[row, c]
    fold_sum(partial, 0, t, BLOCK, BLOCK)
    m = partial[0] / n
    cuda.syncthreads()  # every thread has read the sum before the slots are reused

    partial[t] = 0
    for c in range(t, dim, BLOCK):
        d = x[row, c] - m
        partial[t] += d * d
    fold_sum(partial, 0, t, BLOCK, BLOCK)
    if t == 0:
        mean[row] = m
        rstd[row] = 1 / math.sqrt(partial[0] / n + eps)
    cuda.syncthreads()  # rstd[row] is rounded to the statistics type, as the reference keeps it, then read by all
    r = rstd[row]

    for c in range(t, dim, BLOCK):
        y[row, c] = (x[row, c] - m) * r * weight[c] + bias[c]


@register(
    "void(float32[:, ::1], float32[:, ::1], float32[::1], float32[::1], float32[::1], float32, float32[:, ::1])",
    "void(float16[:, ::1], float16[:, ::1], float32[::1], float32[::1], float16[::1], float32, float16[:, ::1])",
    "void(float64[:, ::1], float64[:, ::1], float64[::1], float64[::1], float64[::1], float64, float64[:, ::1])",
)
@cuda.jit
def layer_norm_backward_kernel(dy, x, mean, rstd, weight, n, dx):
    # One block computes one row of dx. Two shared-memory reductions give the row sums of g = dy * weight and
    # of g * xhat; then every thread writes its columns of dx.
    row = cuda.blockIdx.x
    t = cuda.threadIdx.x
    dim = x.shape[1]
    m = mean[row]
    r = rstd[row]
    partial_g = cuda.shared.array(BLOCK, mean.dtype)
    partial_gx = cuda.shared.array(BLOCK, mean.dtype)

    partial_g[t] = 0
    partial_gx[t] = 0
    for c in range(t, dim, BLOCK):
        g = dy[row, c] * weight[c]
        partial_g[t] += g
        partial_gx[t] += g * ((x[row, c] - m) * r)
    fold_sum(partial_g, 0, t, BLOCK, BLOCK)
    fold_sum(partial_gx, 0, t, BLOCK, BLOCK)
    mean_g = partial_g[0] / n
    mean_gx = partial_gx[0] / n

    for c in range(t, dim, BLOCK):
        xhat = (x[row, c] - m) * r
        dx[row, c] = r * (dy[row, c] * weight[c] - mean_g - xhat * mean_gx)


@register(
    "void(float32[:, ::1], float32[:, ::1], float32[::1], float32[::1], float32[::1], float32[::1])",
    "void(float16[:, ::1], float16[:, ::1], float32[::1], float32[::1], float16[::1], float16[::1])",
    "void(float64[:, ::1], float64[:, ::1], float64[::1], float64[::1], float64[::1], float64[::1])",
)
@cuda.jit
def layer_norm_parameter_grad_kernel(dy, x, mean, rstd, dweight, dbias):
    # One thread sums one column over all rows; neighbouring threads read neighbouring columns, so every row's
    # reads are coalesced. The sums live in a two-element local array of the statistics type.
    c = cuda.grid(1)
    if c < x.shape[1]:
        sums = cuda.local.array(2, mean.dtype)
        sums[0] = 0
        sums[1] = 0
        for row in range(x.shape[0]):
            sums[0] += dy[row, c] * ((x[row, c] - mean[row]) * rstd[row])
            sums[1] += dy[row, c]
        dweight[c] = sums[0]
        dbias[c] = sums[1]


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _float_input(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    dtype = memory.check_dtype(x.dtype, f"{arg}.dtype")
    if dtype.kind != "f":
        raise TypeError(f"{arg}.dtype: layer norm needs a floating dtype (float16/32/64), got {dtype}")
    memory.require_contiguous(x, arg)
    return x


def _like(a: Any, arg: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """``a`` as a device array, checked to have ``shape`` and ``dtype``."""
    a = memory.as_device_array(a, arg)
    if a.dtype != dtype:
        raise TypeError(f"{arg}.dtype: expected {dtype}, got {a.dtype}")
    if tuple(a.shape) != shape:
        raise ValueError(f"{arg}: expected shape {shape}, got {tuple(a.shape)}")
    memory.require_contiguous(a, arg)
    return a


def _rows(x: Any) -> tuple[int, int]:
    shape = tuple(x.shape)
    if not shape or shape[-1] == 0:
        raise ValueError(f"x: layer norm needs a non-empty last axis to normalise over, got shape {shape}")
    return size_of(shape[:-1]), shape[-1]


def _filled(dim: int, dtype: np.dtype, value: float) -> Any:
    return memory.to_device(np.full(dim, value, dtype))


def layer_norm(x: Any, weight: Any | None, bias: Any | None, eps: float = 1e-5) -> tuple[Any, Any, Any]:
    """Normalise every row of ``x`` over its last axis; returns ``(y, mean, rstd)``, the last two for backward.

    ``weight`` and ``bias`` have shape ``(D,)`` and ``x``'s dtype, or are None (ones and zeros). ``mean`` and
    ``rstd`` have shape ``x.shape[:-1]`` and dtype :func:`statistics_dtype`. Floats only.
    """
    x = _float_input(x, "x")
    rows, dim = _rows(x)
    if weight is not None:
        weight = _like(weight, "weight", (dim,), x.dtype)
    if bias is not None:
        bias = _like(bias, "bias", (dim,), x.dtype)
    if not eps >= 0:
        raise ValueError(f"eps: must be >= 0, got {eps!r}")
    return _layer_norm(x, weight, bias, eps)


@dispatch(reference=layer_norm_reference)
def _layer_norm(x: Any, weight: Any | None, bias: Any | None, eps: float) -> tuple[Any, Any, Any]:
    rows, dim = _rows(x)
    acc = statistics_dtype(x.dtype)
    y = memory.empty(tuple(x.shape), x.dtype)
    mean = memory.empty((rows,), acc)
    rstd = memory.empty((rows,), acc)
    if rows:
        layer_norm_kernel[rows, BLOCK](
            x.reshape(rows, dim),
            _filled(dim, x.dtype, 1) if weight is None else weight,
            _filled(dim, x.dtype, 0) if bias is None else bias,
            acc.type(eps),
            acc.type(dim),
            y.reshape(rows, dim),
            mean,
            rstd,
        )
    stats_shape = tuple(x.shape)[:-1]
    return y, mean.reshape(stats_shape), rstd.reshape(stats_shape)


def layer_norm_backward(dy: Any, x: Any, mean: Any, rstd: Any, weight: Any | None) -> tuple[Any, Any, Any]:
    """Gradients of :func:`layer_norm`: ``(dx, dweight, dbias)``, the last two of shape ``(D,)``.

    ``mean`` and ``rstd`` are what :func:`layer_norm` returned. ``dweight`` and ``dbias`` are always computed;
    with ``weight=None`` the weight is taken as ones (ignore ``dweight`` and ``dbias`` if the forward pass had no
    weight or no bias).
    """
    x = _float_input(x, "x")
    rows, dim = _rows(x)
    dy = _like(dy, "dy", tuple(x.shape), x.dtype)
    acc = statistics_dtype(x.dtype)
    stats_shape = tuple(x.shape)[:-1]
    mean = _like(mean, "mean", stats_shape, acc)
    rstd = _like(rstd, "rstd", stats_shape, acc)
    if weight is not None:
        weight = _like(weight, "weight", (dim,), x.dtype)
    return _layer_norm_backward(dy, x, mean, rstd, weight)


@dispatch(reference=layer_norm_backward_reference)
def _layer_norm_backward(dy: Any, x: Any, mean: Any, rstd: Any, weight: Any | None) -> tuple[Any, Any, Any]:
    rows, dim = _rows(x)
    acc = statistics_dtype(x.dtype)
    dx = memory.empty(tuple(x.shape), x.dtype)
    dweight = memory.empty((dim,), x.dtype)
    dbias = memory.empty((dim,), x.dtype)
    x2, dy2 = x.reshape(rows, dim), dy.reshape(rows, dim)
    mean1, rstd1 = mean.reshape(rows), rstd.reshape(rows)
    if rows:
        layer_norm_backward_kernel[rows, BLOCK](
            dy2,
            x2,
            mean1,
            rstd1,
            _filled(dim, x.dtype, 1) if weight is None else weight,
            acc.type(dim),
            dx.reshape(rows, dim),
        )
    layer_norm_parameter_grad_kernel[blocks_for(dim, BLOCK), BLOCK](dy2, x2, mean1, rstd1, dweight, dbias)
    return dx, dweight, dbias
