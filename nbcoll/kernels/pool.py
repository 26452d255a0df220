"""2-D max pooling: the largest value of every window and where it was, and the gradient sent back there.

With the window geometry of :class:`nbcoll.kernels.im2col.ConvGeometry` (kernel, stride, padding, dilation)::

    max_pool2d(x):  for n, c, oy, ox:
                        taps = [(iy, ix) for ky, kx if (iy, ix) is inside x]     (padding is never picked)
                        out[n, c, oy, ox] = max over taps of x[n, c, iy, ix]
                        argmax[n, c, oy, ox] = iy * W + ix of the first maximum (row-major tap order)
                    a window with no tap inside x (all padding, which dilation allows): out = lowest(dtype)
                    (-inf for floats, as in PyTorch) and argmax = -1, so it sends no gradient back

    max_pool2d_backward(dy, argmax):  dx = zeros;  for n, c, oy, ox:  dx[n, c, argmax[n, c, oy, ox]] += dy[...]

``argmax`` indexes the H * W plane of its (n, c), as PyTorch's ``return_indices`` does. A NaN wins over any
number, and the first NaN of a window is the one reported (NumPy's ``argmax`` rule). When windows overlap
(stride < kernel) one input can be the maximum of several windows, so the backward adds atomically; float16,
which has no atomic add, accumulates in float32.

Example::

    from nbcoll.kernels import pool
    from nbcoll.kernels.im2col import ConvGeometry
    g = ConvGeometry.of(x.shape, kernel_size=2, stride=2)
    y, argmax = pool.max_pool2d(x, g)                 # (N, C, H // 2, W // 2) each
    dx = pool.max_pool2d_backward(dy, argmax, g)      # (N, C, H, W)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int64

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.im2col import GEOMETRY_SIGNATURE, ConvGeometry, narrow_kernel
from nbcoll.kernels.indexing import flat_view, launch_1d, size_of
from nbcoll.kernels.registry import register

# ---------------------------------------------------------------------------------------------------------------
# NumPy references: walk the taps in order and keep, per output, the best value and where it was.


def lowest(dtype: Any) -> Any:
    """What a window with no input holds: -inf for floats, the smallest integer otherwise (PyTorch's choice)."""
    dtype = np.dtype(dtype)
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def max_pool2d_reference(x: np.ndarray, g: ConvGeometry) -> tuple[np.ndarray, np.ndarray]:
    n, c, h, w = g.shape
    (oh, ow), (sy, sx), (py, px), (dy, dx) = g.out_hw, g.stride, g.padding, g.dilation
    best = np.full((n, c, oh, ow), lowest(x.dtype), x.dtype)
    where = np.full((n, c, oh, ow), -1, np.int64)
    for ky in range(g.kernel[0]):
        iy = np.arange(oh) * sy - py + ky * dy
        for kx in range(g.kernel[1]):
            ix = np.arange(ow) * sx - px + kx * dx
            inside = ((iy >= 0) & (iy < h))[:, None] & ((ix >= 0) & (ix < w))[None, :]
            value = x[:, :, np.clip(iy, 0, max(h - 1, 0))][:, :, :, np.clip(ix, 0, max(w - 1, 0))]
            with np.errstate(invalid="ignore"):
                better = (where < 0) | (value > best) | (np.isnan(value) & ~np.isnan(best))
            take = inside & better
            best = np.where(take, value, best)
            where = np.where(take, (iy[:, None] * w + ix[None, :]), where)
    return best, where


def max_pool2d_backward_reference(dy: np.ndarray, argmax: np.ndarray, g: ConvGeometry) -> np.ndarray:
    n, c, h, w = g.shape
    dx = np.zeros((n * c, h * w), np.float32 if dy.dtype == np.float16 else dy.dtype)
    rows = np.repeat(np.arange(n * c), size_of(g.out_hw))
    picked = argmax.reshape(-1)
    found = picked >= 0
    np.add.at(dx, (rows[found], picked[found]), dy.reshape(-1)[found])
    return dx.reshape(g.shape).astype(dy.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels.


@register(
    f"void(float32[::1], {GEOMETRY_SIGNATURE}, float32[::1], int64[::1])",
    f"void(float64[::1], {GEOMETRY_SIGNATURE}, float64[::1], int64[::1])",
    f"void(float16[::1], {GEOMETRY_SIGNATURE}, float16[::1], int64[::1])",
    f"void(int32[::1], {GEOMETRY_SIGNATURE}, int32[::1], int64[::1])",
)
@cuda.jit
def max_pool2d_kernel(x, shape, kernel, stride, padding, dilation, out_hw, out, argmax):
    # One thread scans the window of one output: the first tap inside x starts the search, a larger value (or
    # the first NaN) replaces it.
    i = cuda.grid(1)
    if i < out.size:
        oh, ow = out_hw
        h, w = shape[2], shape[3]
        ox = i % ow
        oy = (i // ow) % oh
        plane = i // (ow * oh)
        best = out[i]  # lowest(dtype), as out was filled; overwritten by the first tap inside x
        where = int64(-1)
        for ky in range(kernel[0]):
            iy = oy * stride[0] - padding[0] + ky * dilation[0]
            if iy >= 0 and iy < h:
                for kx in range(kernel[1]):
                    ix = ox * stride[1] - padding[1] + kx * dilation[1]
                    if ix >= 0 and ix < w:
                        value = x[(plane * h + iy) * w + ix]
                        if where < 0 or value > best or (value != value and best == best):
                            best = value
                            where = iy * w + ix
        if where >= 0:
            out[i] = best  # an empty window (all padding) keeps the lowest value that out was filled with
        argmax[i] = where


@register(
    "void(float32[::1], int64[::1], int64, int64, float32[::1])",
    "void(float64[::1], int64[::1], int64, int64, float64[::1])",
    "void(float32[::1], int64[::1], int64, int64, float16[::1])",
)
@cuda.jit
def max_pool2d_backward_kernel(acc, argmax, plane_outputs, plane_inputs, dy):
    # One thread sends one output's gradient to the input that was its maximum (skipping empty windows).
    i = cuda.grid(1)
    if i < dy.size:
        where = argmax[i]
        if where >= 0:
            cuda.atomic.add(acc, (i // plane_outputs) * plane_inputs + where, dy[i])


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _input(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    memory.check_dtype(x.dtype, f"{arg}.dtype")
    memory.require_contiguous(x, arg)
    return x


def max_pool2d(x: Any, geometry: ConvGeometry) -> tuple[Any, Any]:
    """The maximum of every window and its position ``iy * W + ix`` in its plane (int64); both (N, C, OH, OW)."""
    x = _input(x, "x")
    if tuple(x.shape) != geometry.shape:
        raise ValueError(f"x: expected shape {geometry.shape} (the geometry's), got {tuple(x.shape)}")
    return _max_pool2d(x, geometry)


@dispatch(reference=max_pool2d_reference)
def _max_pool2d(x: Any, geometry: ConvGeometry) -> tuple[Any, Any]:
    out_shape = geometry.shape[:2] + geometry.out_hw
    out = memory.to_device(np.full(out_shape, lowest(x.dtype), x.dtype))  # what an all-padding window gives
    argmax = memory.empty(out_shape, np.int64)
    launch_1d(max_pool2d_kernel, out.size, flat_view(x), *geometry.launch_args(), flat_view(out), flat_view(argmax))
    return out, argmax


def max_pool2d_backward(dy: Any, argmax: Any, geometry: ConvGeometry) -> Any:
    """``dx = zeros(shape); dx[n, c].flat[argmax[n, c, oy, ox]] += dy[n, c, oy, ox]``; floating ``dy`` only."""
    dy, argmax = _input(dy, "dy"), _input(argmax, "argmax")
    out_shape = geometry.shape[:2] + geometry.out_hw
    if np.dtype(dy.dtype).kind != "f":
        raise TypeError(f"dy.dtype: a gradient must have a floating dtype, got {dy.dtype}")
    if tuple(dy.shape) != out_shape or tuple(argmax.shape) != out_shape or argmax.dtype != np.int64:
        raise ValueError(
            f"dy, argmax: expected shape {out_shape} (and int64 argmax), got {tuple(dy.shape)} and "
            f"{tuple(argmax.shape)} {argmax.dtype}"
        )
    return _max_pool2d_backward(dy, argmax, geometry)


@dispatch(reference=max_pool2d_backward_reference)
def _max_pool2d_backward(dy: Any, argmax: Any, geometry: ConvGeometry) -> Any:
    wide = np.dtype(np.float32) if dy.dtype == np.float16 else np.dtype(dy.dtype)
    acc = memory.zeros(geometry.shape, wide)
    launch_1d(
        max_pool2d_backward_kernel,
        dy.size,
        flat_view(acc),
        flat_view(argmax),
        size_of(geometry.out_hw),
        size_of(geometry.shape[2:]),
        flat_view(dy),
    )
    if wide == dy.dtype:
        return acc
    out = memory.empty(geometry.shape, dy.dtype)
    launch_1d(narrow_kernel, out.size, flat_view(acc), flat_view(out))
    return out
