"""Special functions: ``erf``, which the exact GELU needs, with its derivative beside it.

::

    y = erf(x) = 2 / sqrt(pi) * integral_0^x exp(-t**2) dt        dx = dy * 2 / sqrt(pi) * exp(-x**2)

The kernels are :mod:`nbcoll.kernels.elementwise`'s.

Example::

    y = Erf.apply(x)             # a Tensor of erf(x[i])
"""

from __future__ import annotations

import math
from typing import Any

from nbcoll.kernels.elementwise import binary, unary
from nbcoll.tensors.arrays import scalar
from nbcoll.tensors.function import Context, Function

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class Erf(Function):
    """``for i: y[i] = erf(x[i])``; dx = dy * 2 / sqrt(pi) * exp(-x**2)"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        ctx.save_for_backward(x)
        return unary("erf", x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (x,) = ctx.saved_tensors
        density = unary("exp", unary("neg", binary("mul", x, x)))
        return binary("mul", dy, binary("mul", density, scalar(TWO_OVER_SQRT_PI, x.dtype)))


__all__ = ["Erf"]
