"""Stencils: 1-D and 2-D "valid" cross-correlation through a shared-memory tile with a halo.

::

    conv1d(x, w):  for i in range(N - K + 1):                       out[i] = sum_k x[i + k] * w[k]
    conv2d(x, w):  for i, j in range(H - KH + 1) x range(W - KW + 1): out[i, j] = sum_a,b x[i + a, j + b] * w[a, b]

(Deep learning's "convolution" is this cross-correlation: the filter is not flipped.)

Every output reads K neighbouring inputs, and neighbouring outputs read almost the same ones, so a naive kernel
reads each input from global memory K times. Here a block first copies the inputs its outputs need into shared
memory: its own tile of TILE inputs plus a *halo* of K - 1 more on the far side, which the last outputs of the
tile also need. After one barrier, every thread computes its output from the fast shared copy. The halo is why
the filter size is bounded: the shared tile has a fixed size (``MAX_FILTER_1D``, ``MAX_FILTER_2D``).

Integer results wrap around as NumPy's integer arithmetic does; float16 accumulates in float16.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import stencil
    >>> signal = nbcoll.to_device(np.array([1, 2, 3, 4, 5], np.float32))
    >>> box = nbcoll.to_device(np.full(3, 1 / 3, np.float32))
    >>> nbcoll.to_host(stencil.conv1d(signal, box))          # signal (N,), box (K,) -> (N - K + 1,)
    array([2., 3., 4.], dtype=float32)
    >>> image = nbcoll.to_device(np.tile(np.array([0, 0, 1, 1], np.float32), (4, 1)))    # a vertical edge
    >>> sobel = nbcoll.to_device(np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float32))
    >>> nbcoll.to_host(stencil.conv2d(image, sobel))          # image (H, W), sobel (3, 3) -> (H - 2, W - 2)
    array([[4., 4.],
           [4., 4.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import blocks_for
from nbcoll.kernels.registry import register

TILE_1D = 64
"""Outputs (and threads) per block of :func:`conv1d`."""
MAX_FILTER_1D = 65
"""The longest 1-D filter: the shared tile holds TILE_1D + MAX_FILTER_1D - 1 inputs."""
HALO_TILE_1D = TILE_1D + MAX_FILTER_1D - 1

TILE_2D = 8
"""Outputs per block side of :func:`conv2d`: a block is TILE_2D x TILE_2D threads."""
MAX_FILTER_2D = 9
"""The largest 2-D filter side: the shared tile is (TILE_2D + MAX_FILTER_2D - 1) on each side."""
HALO_TILE_2D = TILE_2D + MAX_FILTER_2D - 1


# ---------------------------------------------------------------------------------------------------------------
# NumPy references: one shifted multiply-add per filter tap.


def conv1d_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n = max(x.shape[0] - w.shape[0] + 1, 0)
    out = np.zeros(n, x.dtype)
    for k in range(w.shape[0]):
        out += x[k : k + n] * w[k]
    return out


def conv2d_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    rows, cols = max(x.shape[0] - w.shape[0] + 1, 0), max(x.shape[1] - w.shape[1] + 1, 0)
    out = np.zeros((rows, cols), x.dtype)
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            out += x[a : a + rows, b : b + cols] * w[a, b]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Kernels.


@register(
    "void(float32[::1], float32[::1], float32[::1])",
    "void(float16[::1], float16[::1], float16[::1])",
    "void(int8[::1], int8[::1], int8[::1])",
    "void(uint64[::1], uint64[::1], uint64[::1])",
)
@cuda.jit
def conv1d_kernel(x, w, out):
    # One thread computes one output. First the block's threads copy the inputs of the block's outputs (the tile
    # and its halo of K - 1) into shared memory, each thread copying every TILE_1D-th one.
    tile = cuda.shared.array(HALO_TILE_1D, x.dtype)
    t = cuda.threadIdx.x
    start = cuda.blockIdx.x * TILE_1D
    taps = w.size
    for j in range(t, TILE_1D + taps - 1, TILE_1D):
        if start + j < x.size:
            tile[j] = x[start + j]
    cuda.syncthreads()

    i = start + t
    if i < out.size:
        acc = tile[t] * w[0]
        for k in range(1, taps):
            acc += tile[t + k] * w[k]
        out[i] = acc


@register(
    "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
    "void(float16[:, ::1], float16[:, ::1], float16[:, ::1])",
    "void(int32[:, ::1], int32[:, ::1], int32[:, ::1])",
)
@cuda.jit
def conv2d_kernel(x, w, out):
    # One thread computes one output. The block first copies its TILE_2D x TILE_2D inputs plus the halo below
    # and to the right (KH - 1 rows, KW - 1 columns) into shared memory.
    tile = cuda.shared.array((HALO_TILE_2D, HALO_TILE_2D), x.dtype)
    ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
    row0, col0 = cuda.blockIdx.y * TILE_2D, cuda.blockIdx.x * TILE_2D
    kh, kw = w.shape[0], w.shape[1]
    for r in range(ty, TILE_2D + kh - 1, TILE_2D):
        for c in range(tx, TILE_2D + kw - 1, TILE_2D):
            if row0 + r < x.shape[0] and col0 + c < x.shape[1]:
                tile[r, c] = x[row0 + r, col0 + c]
    cuda.syncthreads()

    i, j = row0 + ty, col0 + tx
    if i < out.shape[0] and j < out.shape[1]:
        acc = tile[ty, tx] * w[0, 0]
        for a in range(kh):
            for b in range(kw):
                if a > 0 or b > 0:
                    acc += tile[ty + a, tx + b] * w[a, b]
        out[i, j] = acc


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _inputs(x: Any, w: Any, ndim: int) -> tuple[Any, Any]:
    x, w = memory.as_device_array(x, "x"), memory.as_device_array(w, "w")
    memory.check_dtype(x.dtype, "x.dtype")
    if w.dtype != x.dtype:
        raise TypeError(f"w.dtype: must equal x.dtype ({x.dtype}), got {w.dtype}")
    for a, arg in ((x, "x"), (w, "w")):
        if a.ndim != ndim:
            raise ValueError(f"{arg}: expected a {ndim}-d array, got shape {tuple(a.shape)}")
        memory.require_contiguous(a, arg)
    return x, w


def _check_filter(w: Any, limit: int) -> None:
    shape = tuple(w.shape)
    if min(shape) < 1 or max(shape) > limit:
        raise ValueError(
            f"w: every filter side must be in [1, {limit}] (the halo must fit the shared-memory tile), "
            f"got w.shape={shape}"
        )


def conv1d(x: Any, w: Any) -> Any:
    """``out[i] = sum_k x[i + k] * w[k]`` for ``i`` in ``range(N - K + 1)`` (empty when N < K).

    ``x`` (N,) and ``w`` (K,) share a dtype; ``1 <= K <= MAX_FILTER_1D``.
    """
    x, w = _inputs(x, w, 1)
    _check_filter(w, MAX_FILTER_1D)
    return _conv1d(x, w)


@dispatch(reference=conv1d_reference)
def _conv1d(x: Any, w: Any) -> Any:
    n = max(x.shape[0] - w.shape[0] + 1, 0)
    out = memory.empty((n,), x.dtype)
    if n:
        conv1d_kernel[blocks_for(n, TILE_1D), TILE_1D](x, w, out)
    return out


def conv2d(x: Any, w: Any) -> Any:
    """``out[i, j] = sum_a,b x[i + a, j + b] * w[a, b]``, the "valid" part only: ``(H - KH + 1, W - KW + 1)``.

    ``x`` (H, W) and ``w`` (KH, KW) share a dtype; both filter sides are in ``[1, MAX_FILTER_2D]``.
    """
    x, w = _inputs(x, w, 2)
    _check_filter(w, MAX_FILTER_2D)
    return _conv2d(x, w)


@dispatch(reference=conv2d_reference)
def _conv2d(x: Any, w: Any) -> Any:
    rows, cols = max(x.shape[0] - w.shape[0] + 1, 0), max(x.shape[1] - w.shape[1] + 1, 0)
    out = memory.empty((rows, cols), x.dtype)
    if rows and cols:
        grid = (blocks_for(cols, TILE_2D), blocks_for(rows, TILE_2D))
        conv2d_kernel[grid, (TILE_2D, TILE_2D)](x, w, out)
    return out
