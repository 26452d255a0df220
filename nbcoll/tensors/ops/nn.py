"""Layer normalisation and dropout: fused kernels whose backward kernels sit beside them.

::

    y = (x - mean) * rstd * weight + bias          (over the last axis)
    y = x * mask / (1 - p)                         (mask from a counter-based generator: reproducible per seed)

Example::

    y = LayerNorm.apply(x, weight, bias, 1e-5)     # what functional.layer_norm(x, weight, bias) does
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import norm, random
from nbcoll.tensors.function import Context, Function


class LayerNorm(Function):
    """``for each row: y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias``; weight and bias may be None."""

    @staticmethod
    def forward(ctx: Context, x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
        y, mean, rstd = norm.layer_norm(x, weight, bias, eps=eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any, Any, None]:
        x, mean, rstd, weight = ctx.saved_tensors
        dx, dweight, dbias = norm.layer_norm_backward(dy, x, mean, rstd, weight)
        return dx, dweight, dbias, None


class Dropout(Function):
    """``for i: y[i] = x[i] * mask[i] / (1 - p)`` where ``mask[i]`` is 1 with probability ``1 - p``."""

    @staticmethod
    def forward(ctx: Context, x: Any, p: float, seed: int) -> Any:
        y, mask = random.dropout(x, p, seed)
        ctx.p = p
        ctx.save_for_backward(mask)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        (mask,) = ctx.saved_tensors
        return random.dropout_backward(dy, mask, ctx.p), None, None
