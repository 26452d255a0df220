"""im2col and col2im: a 2-D convolution turned into one matrix product, and the gradient turned back.

For an input ``x`` (N, C, H, W) and a KH x KW window moved with ``stride``, ``padding`` and ``dilation``, every
output position (oy, ox) of an (OH, OW) grid sees C * KH * KW input values. ``im2col`` copies them into the
columns of a matrix, so that a convolution with weights ``w`` (O, C, KH, KW) is ``w.reshape(O, -1) @ cols``::

    im2col(x):  for n, c, ky, kx, oy, ox:
                    iy = oy * stride_y - pad_y + ky * dilation_y      (ix likewise)
                    cols[n, (c, ky, kx), (oy, ox)] = x[n, c, iy, ix] if (iy, ix) is inside x else 0

    col2im(cols):  dx = zeros(x.shape);  for the same indices:  dx[n, c, iy, ix] += cols[n, (c, ky, kx), (oy, ox)]

``cols`` has shape (N, C * KH * KW, OH * OW), PyTorch's ``unfold`` layout. ``im2col`` is a *gather*: every thread
writes its own element of cols and reads from a computed place. ``col2im``, its transpose and the backward of
im2col, is a *scatter-add*: overlapping windows (stride < kernel) send several columns to the same input element,
so the adds are atomic. col2im is a gradient and takes floating dtypes only; float16, which has no atomic add,
accumulates in float32.

Example::

    from nbcoll.kernels import im2col as unfold
    geometry = unfold.ConvGeometry.of(x.shape, kernel_size=3, stride=2, padding=1)
    cols = unfold.im2col(x, geometry)               # (N, C * 9, OH * OW)
    dx = unfold.col2im(dcols, geometry)             # (N, C, H, W), overlapping windows summed
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view, launch_1d
from nbcoll.kernels.registry import register
from nbcoll.kernels.widen import accumulate_dtype

Pair = tuple[int, int]


def pair(value: Any, arg: str, minimum: int) -> Pair:
    """``value`` (an int or two ints) as a pair of ints ``>= minimum``; a ``ValueError`` names ``arg`` otherwise."""
    values = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(values) != 2 or not all(isinstance(v, (int, np.integer)) and v >= minimum for v in values):
        raise ValueError(f"{arg}: expected an int >= {minimum} or a pair of them, got {value!r}")
    return int(values[0]), int(values[1])


@dataclass(frozen=True)
class ConvGeometry:
    """Where a window of ``kernel`` taps reads in an input of ``shape`` (N, C, H, W), and the output grid.

    Example::

        g = ConvGeometry.of((8, 3, 32, 32), kernel_size=3, padding=1)
        g.out_hw                  # (32, 32)
        g.cols_shape              # (8, 27, 1024)
    """

    shape: tuple[int, int, int, int]
    kernel: Pair
    stride: Pair
    padding: Pair
    dilation: Pair
    out_hw: Pair

    @classmethod
    def of(cls, shape: Any, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1) -> ConvGeometry:
        """Check the arguments once and compute ``OH = (H + 2 * pad - dilation * (KH - 1) - 1) // stride + 1``."""
        shape = tuple(int(n) for n in shape)
        if len(shape) != 4:
            raise ValueError(f"x: expected shape (N, C, H, W), got {shape}")
        kernel = pair(kernel_size, "kernel_size", 1)
        stride, padding, dilation = (
            pair(stride, "stride", 1),
            pair(padding, "padding", 0),
            pair(dilation, "dilation", 1),
        )
        out = []
        for size, k, s, p, d in zip(shape[2:], kernel, stride, padding, dilation, strict=True):
            reach = d * (k - 1) + 1  # input positions one window spans
            if size + 2 * p < reach:
                raise ValueError(
                    f"kernel_size: a window spanning {reach} positions (kernel {kernel}, dilation {dilation}) does "
                    f"not fit the padded input: x.shape={shape} with padding {padding}"
                )
            out.append((size + 2 * p - reach) // s + 1)
        return cls(shape, kernel, stride, padding, dilation, (out[0], out[1]))

    @property
    def cols_shape(self) -> tuple[int, int, int]:
        n, c = self.shape[:2]
        return (n, c * self.kernel[0] * self.kernel[1], self.out_hw[0] * self.out_hw[1])

    def launch_args(self) -> tuple[Any, ...]:
        """The geometry as the tuples of int64 the kernels take (the same for im2col and col2im)."""
        return (
            tuple(np.int64(n) for n in self.shape),
            tuple(np.int64(n) for n in self.kernel),
            tuple(np.int64(n) for n in self.stride),
            tuple(np.int64(n) for n in self.padding),
            tuple(np.int64(n) for n in self.dilation),
            tuple(np.int64(n) for n in self.out_hw),
        )


# ---------------------------------------------------------------------------------------------------------------
# NumPy references: one strided slice of the zero-padded input per kernel tap.


def _tap_slices(g: ConvGeometry, ky: int, kx: int) -> tuple[slice, slice]:
    """The rows and columns of the padded input that tap (ky, kx) reads for the whole output grid."""
    (oh, ow), (sy, sx), (dy, dx) = g.out_hw, g.stride, g.dilation
    return (
        slice(ky * dy, ky * dy + sy * (oh - 1) + 1, sy),
        slice(kx * dx, kx * dx + sx * (ow - 1) + 1, sx),
    )


def im2col_reference(x: np.ndarray, g: ConvGeometry) -> np.ndarray:
    n, c, _, _ = g.shape
    (kh, kw), (py, px) = g.kernel, g.padding
    padded = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)))
    cols = np.empty((n, c, kh, kw) + g.out_hw, x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            rows, columns = _tap_slices(g, ky, kx)
            cols[:, :, ky, kx] = padded[:, :, rows, columns]
    return cols.reshape(g.cols_shape)


def col2im_reference(cols: np.ndarray, g: ConvGeometry) -> np.ndarray:
    n, c, h, w = g.shape
    (kh, kw), (py, px) = g.kernel, g.padding
    padded = np.zeros((n, c, h + 2 * py, w + 2 * px), accumulate_dtype(cols.dtype))
    taps = cols.reshape((n, c, kh, kw) + g.out_hw)
    for ky in range(kh):
        for kx in range(kw):
            rows, columns = _tap_slices(g, ky, kx)
            padded[:, :, rows, columns] += taps[:, :, ky, kx]
    return np.ascontiguousarray(padded[:, :, py : py + h, px : px + w]).astype(cols.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels. Arrays arrive flattened; the geometry arrives as tuples of int64.

GEOMETRY_SIGNATURE = ", ".join(["UniTuple(int64, 4)"] + ["UniTuple(int64, 2)"] * 5)
"""The Numba types of :meth:`ConvGeometry.launch_args` (shape, kernel, stride, padding, dilation, out_hw)."""


@cuda.jit(device=True)
def _source_offset(i, shape, kernel, stride, padding, dilation, out_hw):
    """Offset in x of the input that element ``i`` of cols reads, or -1 when it falls in the padding."""
    oh, ow = out_hw
    kh, kw = kernel
    ox = i % ow
    rest = i // ow
    oy = rest % oh
    rest //= oh
    kx = rest % kw
    rest //= kw
    ky = rest % kh
    plane = rest // kh  # n * C + c
    iy = oy * stride[0] - padding[0] + ky * dilation[0]
    ix = ox * stride[1] - padding[1] + kx * dilation[1]
    if iy < 0 or iy >= shape[2] or ix < 0 or ix >= shape[3]:
        return -1
    return (plane * shape[2] + iy) * shape[3] + ix


@register(
    f"void(float32[::1], {GEOMETRY_SIGNATURE}, float32[::1])",
    f"void(float64[::1], {GEOMETRY_SIGNATURE}, float64[::1])",
    f"void(float16[::1], {GEOMETRY_SIGNATURE}, float16[::1])",
    f"void(int8[::1], {GEOMETRY_SIGNATURE}, int8[::1])",
)
@cuda.jit
def im2col_kernel(x, shape, kernel, stride, padding, dilation, out_hw, cols):
    # One thread fills one element of cols: the input its window tap sees, or zero in the padding.
    i = cuda.grid(1)
    if i < cols.size:
        source = _source_offset(i, shape, kernel, stride, padding, dilation, out_hw)
        if source >= 0:
            cols[i] = x[source]
        else:
            cols[i] = 0


@register(
    f"void(float32[::1], {GEOMETRY_SIGNATURE}, float32[::1])",
    f"void(float64[::1], {GEOMETRY_SIGNATURE}, float64[::1])",
    f"void(float32[::1], {GEOMETRY_SIGNATURE}, float16[::1])",
)
@cuda.jit
def col2im_kernel(acc, shape, kernel, stride, padding, dilation, out_hw, cols):
    # One thread adds one element of cols into the input it came from; windows that overlap meet in the atomic.
    i = cuda.grid(1)
    if i < cols.size:
        target = _source_offset(i, shape, kernel, stride, padding, dilation, out_hw)
        if target >= 0:
            cuda.atomic.add(acc, target, cols[i])


@register("void(float32[::1], float16[::1])")
@cuda.jit
def narrow_kernel(acc, out):
    # One thread rounds one float32 sum back to float16.
    i = cuda.grid(1)
    if i < out.size:
        out[i] = acc[i]


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _input(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    memory.check_dtype(x.dtype, f"{arg}.dtype")
    memory.require_contiguous(x, arg)
    return x


def im2col(x: Any, geometry: ConvGeometry) -> Any:
    """``cols[n, (c, ky, kx), (oy, ox)] = x[n, c, oy * sy - py + ky * dy, ox * sx - px + kx * dx]`` (0 outside).

    ``x`` has ``geometry.shape``; the result has ``geometry.cols_shape`` and x's dtype.
    """
    x = _input(x, "x")
    if tuple(x.shape) != geometry.shape:
        raise ValueError(f"x: expected shape {geometry.shape} (the geometry's), got {tuple(x.shape)}")
    return _im2col(x, geometry)


@dispatch(reference=im2col_reference)
def _im2col(x: Any, geometry: ConvGeometry) -> Any:
    cols = memory.empty(geometry.cols_shape, x.dtype)
    launch_1d(im2col_kernel, cols.size, flat_view(x), *geometry.launch_args(), flat_view(cols))
    return cols


def col2im(cols: Any, geometry: ConvGeometry) -> Any:
    """The transpose of :func:`im2col`: ``dx = zeros(shape)``, then every element of cols added where it came from.

    ``cols`` has ``geometry.cols_shape``; the result has ``geometry.shape`` and cols' dtype.
    """
    cols = _input(cols, "cols")
    if np.dtype(cols.dtype).kind != "f":
        raise TypeError(f"cols.dtype: col2im adds gradients and takes floating dtypes only, got {cols.dtype}")
    if tuple(cols.shape) != geometry.cols_shape:
        raise ValueError(f"cols: expected shape {geometry.cols_shape} (the geometry's), got {tuple(cols.shape)}")
    return _col2im(cols, geometry)


@dispatch(reference=col2im_reference)
def _col2im(cols: Any, geometry: ConvGeometry) -> Any:
    wide = accumulate_dtype(cols.dtype)
    acc = memory.zeros(geometry.shape, wide)
    launch_1d(col2im_kernel, cols.size, flat_view(acc), *geometry.launch_args(), flat_view(cols))
    if wide == cols.dtype:
        return acc
    out = memory.empty(geometry.shape, cols.dtype)
    launch_1d(narrow_kernel, out.size, flat_view(acc), flat_view(out))
    return out
