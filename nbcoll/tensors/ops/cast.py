"""``astype``: converting a tensor to another dtype, and the gradient cast back to the input's dtype.

::

    y = x.astype(dtype)        for i: y[i] = dtype(x[i])        dx = dy.astype(x.dtype)

NumPy's own dtypes convert with :mod:`nbcoll.kernels.copy`'s ``cast`` (NumPy's ``astype`` rules: a float to an
int truncates). bfloat16, float8_e4m3fn and float8_e5m2 convert through float32 with the kernels of
:mod:`nbcoll.kernels.low_precision` (``ml_dtypes``' casts on the numpy backend, bit for bit the same), rounding to
nearest even.

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([1.0, 0.1])
    >>> CastLowPrecision.apply(x, nbcoll.bfloat16).numpy().tolist()  # 0.1 to the nearest bfloat16
    [1.0, 0.10009765625]
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.kernels import low_precision
from nbcoll.kernels.copy import cast
from nbcoll.kernels.low_precision import is_low_precision
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


class Cast(Function):
    """``for i: y[i] = dtype(x[i])``; the gradient is cast back to x's dtype."""

    @staticmethod
    def forward(ctx: Context, x: Any, dtype: Any) -> Any:
        ctx.x_dtype = x.dtype
        return cast(x, dtype)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        return cast(dy, ctx.x_dtype), None


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


def astype(x: Tensor, dtype: Any) -> Tensor:
    """``x.astype(dtype)``: a copy converted to ``dtype`` (NumPy's ``astype``); gradients flow back between
    floating dtypes.

    bfloat16, float8_e4m3fn and float8_e5m2 convert through float32, rounding to nearest even (``ml_dtypes``'
    rules: see :mod:`nbcoll.kernels.low_precision`).

    >>> import nbcoll
    >>> nbcoll.tensor([1.7, -1.7]).astype("int32").numpy()
    array([ 1, -1], dtype=int32)
    >>> nbcoll.tensor([1.7, -1.7]).astype(nbcoll.bfloat16).numpy().tolist()
    [1.703125, -1.703125]
    """
    dtype = memory.check_dtype(dtype, "dtype", allow_bool=True)
    if is_low_precision(dtype) or is_low_precision(x.dtype):
        return CastLowPrecision.apply(x, dtype)
    return Cast.apply(x, dtype)


Tensor.astype = astype
