"""Convolution and pooling over images: Conv2d (im2col, then one matrix product) and MaxPool2d.

A convolution with weights ``w`` (O, C, KH, KW) reads, at every output position, a C x KH x KW window of the
input. ``im2col`` (a gather kernel) copies each window into a column, so the whole layer is one product::

    cols = im2col(x)                                   (N, C * KH * KW, OH * OW)
    y[n] = w.reshape(O, C * KH * KW) @ cols[n] + b     (N, O, OH * OW), then reshaped to (N, O, OH, OW)

Backward needs nothing new: the product's backward gives ``dw`` and ``dcols``, and ``col2im`` (a scatter-add
kernel, im2col's transpose) turns ``dcols`` into ``dx``. Deep learning's "convolution" is a cross-correlation:
the filter is not flipped. Shapes and parameter layout are PyTorch's.

Example::

    conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
    pool = nn.MaxPool2d(2)
    y = pool(conv(images).relu())          # (N, 3, 32, 32) -> (N, 8, 32, 32) -> (N, 8, 16, 16)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nbcoll.kernels.im2col import ConvGeometry, pair
from nbcoll.nn import init
from nbcoll.nn.linear import parameter_dtype
from nbcoll.nn.module import Module
from nbcoll.nn.parameter import Parameter
from nbcoll.nn.shapes import check_input, describe, positive_int
from nbcoll.tensors import Tensor
from nbcoll.tensors.ops.conv import Im2Col
from nbcoll.tensors.ops.conv import MaxPool2d as MaxPool2dFunction


def _uniform_parameter(shape: tuple[int, ...], bound: float, dtype: Any) -> Parameter:
    return init.uniform_(Parameter(np.zeros(shape, parameter_dtype(dtype))), -bound, bound)


def _geometry(layer: Module, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> ConvGeometry:
    """The window geometry for ``x``; a window that does not fit the input is reported in the layer's name."""
    try:
        return ConvGeometry.of(x.shape, kernel_size, stride, padding, dilation)
    except ValueError as error:
        raise ValueError(f"{describe(layer)}: {error}") from None


def _convolve(x: Tensor, weight: Tensor, bias: Tensor | None, geometry: ConvGeometry) -> Tensor:
    out_channels = weight.shape[0]
    cols = Im2Col.apply(x, geometry)
    y = weight.reshape(out_channels, -1) @ cols  # (O, CKK) @ (N, CKK, L): the weight broadcasts over the batch
    if bias is not None:
        y = y + bias.reshape(out_channels, 1)
    return y.reshape(x.shape[0], out_channels, *geometry.out_hw)


def conv2d(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1
) -> Tensor:
    """``y[n, o, oy, ox] = b[o] + sum over c, ky, kx of w[o, c, ky, kx] * x[n, c, iy, ix]`` (0 outside x).

    ``iy = oy * stride - padding + ky * dilation`` (ix likewise); ``x`` (N, C, H, W), ``weight`` (O, C, KH, KW).
    """
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"conv2d: expected x (N, C, H, W) and weight (O, C, KH, KW) with the same C, got {x.shape} and "
            f"{weight.shape}"
        )
    return _convolve(x, weight, bias, ConvGeometry.of(x.shape, weight.shape[2:], stride, padding, dilation))


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1) -> Tensor:
    """``y[n, c, oy, ox] = max of x[n, c, oy*sy - py + ky*dy, ox*sx - px + kx*dx]`` over the taps inside x.

    ``stride`` defaults to ``kernel_size`` (windows that tile the input).
    """
    geometry = ConvGeometry.of(x.shape, kernel_size, kernel_size if stride is None else stride, padding, dilation)
    return MaxPool2dFunction.apply(x, geometry)


class Conv2d(Module):
    """A 2-D convolution over (N, C, H, W) images, with PyTorch's parameters: weight (out, in, KH, KW), bias (out,).

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> conv = nn.Conv2d(1, 4, kernel_size=3, stride=2, padding=1)
        >>> conv(nbcoll.tensor(np.ones((2, 1, 28, 28), np.float32))).shape
        (2, 4, 14, 14)

    ``OH = (H + 2 * padding - dilation * (KH - 1) - 1) // stride + 1`` (likewise OW). Every parameter starts
    uniform in ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` with ``fan_in = in_channels * KH * KW``, PyTorch's default.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        bias: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.in_channels = positive_int(in_channels, "in_channels")
        self.out_channels = positive_int(out_channels, "out_channels")
        self.kernel_size = pair(kernel_size, "kernel_size", 1)
        self.stride, self.padding = pair(stride, "stride", 1), pair(padding, "padding", 0)
        self.dilation = pair(dilation, "dilation", 1)
        bound = 1.0 / math.sqrt(in_channels * self.kernel_size[0] * self.kernel_size[1])
        self.weight = _uniform_parameter((out_channels, in_channels, *self.kernel_size), bound, dtype)
        if bias:
            self.bias = _uniform_parameter((out_channels,), bound, dtype)
        else:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, bias={self.bias is not None}"
        )

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, ("N", self.in_channels, "H", "W"), dtype=self.weight.dtype)
        geometry = _geometry(self, x, self.kernel_size, self.stride, self.padding, self.dilation)
        return _convolve(x, self.weight, self.bias, geometry)


class MaxPool2d(Module):
    """The maximum of every ``kernel_size`` window of (N, C, H, W) images; padding never wins.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> pool = nn.MaxPool2d(2)                  # stride defaults to the kernel size
        >>> x = nbcoll.tensor(np.arange(16.0).reshape(1, 1, 4, 4))
        >>> pool(x).numpy()
        array([[[[ 5.,  7.],
                 [13., 15.]]]])

    ``padding`` may be at most half the kernel size (as in PyTorch). With ``dilation`` a window can still miss
    every input and hold padding only: it gives ``-inf`` (the smallest integer for integer inputs) and no
    gradient, as in PyTorch. PyTorch's ``ceil_mode`` and ``return_indices`` are not provided.
    """

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1) -> None:
        super().__init__()
        self.kernel_size = pair(kernel_size, "kernel_size", 1)
        self.stride = self.kernel_size if stride is None else pair(stride, "stride", 1)
        self.padding, self.dilation = pair(padding, "padding", 0), pair(dilation, "dilation", 1)
        if any(2 * p > k for p, k in zip(self.padding, self.kernel_size, strict=True)):
            raise ValueError(f"padding: must be at most half of kernel_size {self.kernel_size}, got {self.padding}")

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, dilation={self.dilation}"

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, ("N", "C", "H", "W"))
        geometry = _geometry(self, x, self.kernel_size, self.stride, self.padding, self.dilation)
        return MaxPool2dFunction.apply(x, geometry)


__all__ = ["Conv2d", "MaxPool2d", "conv2d", "max_pool2d"]
