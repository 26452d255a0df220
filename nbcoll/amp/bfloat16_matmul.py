"""A bfloat16 matrix product computed as tensor cores do: bfloat16 inputs, a float32 accumulator, a bfloat16 result.

The matmul kernels accumulate float16 in float32 but do not take bfloat16, so autocast runs its bfloat16
products through this op, which widens each bfloat16 input to float32 (exactly: bfloat16 is float32's top half),
multiplies in float32, and rounds the result to bfloat16. Its backward is the same recipe on the gradients::

    y  = bf16(f32(a) @ f32(b))
    da = bf16(unbroadcast(f32(dy) @ f32(b)^T))       db = bf16(unbroadcast(f32(a)^T @ f32(dy)))

Example::

    y = BFloat16MatMul.apply(a, b)         # a, b bfloat16 Tensors of ndim >= 2, batch dimensions broadcast
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.kernels import matmul as matmul_kernels
from nbcoll.kernels.low_precision import cast
from nbcoll.kernels.transpose import transpose
from nbcoll.tensors.arrays import unbroadcast
from nbcoll.tensors.function import Context, Function


class BFloat16MatMul(Function):
    """``for each batch, i, j: y[i, j] = bf16(sum over k of f32(a[i, k]) * f32(b[k, j]))``."""

    takes_low_precision = True  # bfloat16 is otherwise stored, not computed on

    @staticmethod
    def forward(ctx: Context, a: Any, b: Any) -> Any:
        ctx.a_shape, ctx.b_shape, ctx.dtype = tuple(a.shape), tuple(b.shape), a.dtype
        a32, b32 = cast(a, np.float32), cast(b, np.float32)
        ctx.save_for_backward(a32, b32)  # widened once: exact, and what backward multiplies
        return cast(matmul_kernels.matmul(a32, b32), a.dtype)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any]:
        a32, b32 = ctx.saved_tensors
        dy32 = cast(dy, np.float32)
        da = db = None
        if ctx.needs_input_grad[0]:
            da = cast(unbroadcast(matmul_kernels.matmul(dy32, transpose(b32)), ctx.a_shape), ctx.dtype)
        if ctx.needs_input_grad[1]:
            db = cast(unbroadcast(matmul_kernels.matmul(transpose(a32), dy32), ctx.b_shape), ctx.dtype)
        return da, db


__all__ = ["BFloat16MatMul"]
