"""Unfolding windows (im2col) and 2-D max pooling, each with its backward, for convolution and pooling layers.

::

    cols = im2col(x)          dx = col2im(dcols)                  (every window tap sends its gradient home)
    y, argmax = maxpool(x)    dx = zeros;  dx.flat[argmax] += dy  (only each window's maximum gets gradient)

The kernels are :mod:`nbcoll.kernels.im2col`'s and :mod:`nbcoll.kernels.pool`'s. A convolution is then
``weight.reshape(O, -1) @ im2col(x)``: the product's own backward gives the weight's gradient, and Im2Col's
backward the input's. These Functions have no Tensor method: ``nbcoll.nn.Conv2d`` and ``MaxPool2d`` apply them.

Example::

    g = ConvGeometry.of(x.shape, kernel_size=3, padding=1)
    cols = Im2Col.apply(x, g)                     # (N, C * 9, H * W), records col2im for backward
    y = MaxPool2d.apply(x, ConvGeometry.of(x.shape, kernel_size=2, stride=2))
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import im2col as unfold
from nbcoll.kernels import pool
from nbcoll.kernels.im2col import ConvGeometry
from nbcoll.tensors.function import Context, Function


class Im2Col(Function):
    """``cols[n, (c, ky, kx), (oy, ox)] = x[n, c, oy * sy - py + ky * dy, ox * sx - px + kx * dx]`` (0 outside)."""

    @staticmethod
    def forward(ctx: Context, x: Any, geometry: ConvGeometry) -> Any:
        ctx.geometry = geometry
        return unfold.im2col(x, geometry)

    @staticmethod
    def backward(ctx: Context, dcols: Any) -> tuple[Any, None]:
        return unfold.col2im(dcols, ctx.geometry), None


class MaxPool2d(Function):
    """``y[n, c, oy, ox] = max over the window's taps inside x``; the gradient goes to the first maximum."""

    @staticmethod
    def forward(ctx: Context, x: Any, geometry: ConvGeometry) -> Any:
        y, argmax = pool.max_pool2d(x, geometry)
        ctx.geometry = geometry
        ctx.save_for_backward(argmax)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        (argmax,) = ctx.saved_tensors
        return pool.max_pool2d_backward(dy, argmax, ctx.geometry), None
