"""``astype`` to and from bfloat16, float8_e4m3fn and float8_e5m2: every conversion passes through float32.

The kernels are :mod:`nbcoll.kernels.low_precision`'s (``ml_dtypes``' casts on the numpy backend, bit for bit the
same). The gradient is cast back to the input's dtype, as for any ``astype``.

Example::

    >>> import nbcoll
    >>> from nbcoll.tensors.ops.cast_low_precision import CastLowPrecision
    >>> x = nbcoll.tensor([1.0, 0.1])
    >>> CastLowPrecision.apply(x, nbcoll.bfloat16).numpy().tolist()  # 0.1 to the nearest bfloat16
    [1.0, 0.10009765625]
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import low_precision
from nbcoll.tensors.function import Context, Function


class CastLowPrecision(Function):
    """``for i: y[i] = dtype(float32(x[i]))``, where x's dtype or ``dtype`` is low-precision; dx = cast of dy back."""

    takes_low_precision = True

    @staticmethod
    def forward(ctx: Context, x: Any, dtype: Any) -> Any:
        ctx.x_dtype = x.dtype
        return low_precision.cast(x, dtype)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        return low_precision.cast(dy, ctx.x_dtype), None
