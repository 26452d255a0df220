"""Elementwise operations and their derivatives, with NumPy broadcasting.

Each backward multiplies the incoming gradient by the local derivative, then sums it back to the input's shape
where broadcasting stretched the input (``unbroadcast``)::

    y = a * b        da = unbroadcast(dy * b, a.shape)     db = unbroadcast(dy * a, b.shape)

Example::

    y = Mul.apply(a, b)          # what a * b does for two Tensors
"""

from __future__ import annotations

import math
from typing import Any

from nbcoll.kernels.copy import cast
from nbcoll.kernels.elementwise import binary, unary, where
from nbcoll.tensors.arrays import scalar, unbroadcast
from nbcoll.tensors.function import Context, Function


def _shapes(ctx: Context, a: Any, b: Any) -> None:
    ctx.a_shape, ctx.b_shape = tuple(a.shape), tuple(b.shape)


class Add(Function):
    """``for i: y[i] = a[i] + b[i]``"""

    @staticmethod
    def forward(ctx: Context, a: Any, b: Any) -> Any:
        _shapes(ctx, a, b)
        return binary("add", a, b)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any]:
        return unbroadcast(dy, ctx.a_shape), unbroadcast(dy, ctx.b_shape)


class Sub(Function):
    """``for i: y[i] = a[i] - b[i]``"""

    @staticmethod
    def forward(ctx: Context, a: Any, b: Any) -> Any:
        _shapes(ctx, a, b)
        return binary("sub", a, b)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any]:
        db = unbroadcast(unary("neg", dy), ctx.b_shape) if ctx.needs_input_grad[1] else None
        return unbroadcast(dy, ctx.a_shape), db


class Mul(Function):
    """``for i: y[i] = a[i] * b[i]``"""

    @staticmethod
    def forward(ctx: Context, a: Any, b: Any) -> Any:
        _shapes(ctx, a, b)
        ctx.save_for_backward(a, b)
        return binary("mul", a, b)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any]:
        a, b = ctx.saved_tensors
        da = unbroadcast(binary("mul", dy, b), ctx.a_shape) if ctx.needs_input_grad[0] else None
        db = unbroadcast(binary("mul", dy, a), ctx.b_shape) if ctx.needs_input_grad[1] else None
        return da, db


class Div(Function):
    """``for i: y[i] = a[i] / b[i]``; da = dy / b, db = -dy * a / b**2 = -dy * y / b"""

    @staticmethod
    def forward(ctx: Context, a: Any, b: Any) -> Any:
        _shapes(ctx, a, b)
        y = binary("div", a, b)
        ctx.save_for_backward(b, y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any]:
        b, y = ctx.saved_tensors
        da = db = None
        if ctx.needs_input_grad[0]:
            da = unbroadcast(binary("div", dy, b), ctx.a_shape)
        if ctx.needs_input_grad[1]:
            db = unbroadcast(unary("neg", binary("div", binary("mul", dy, y), b)), ctx.b_shape)
        return da, db


class Pow(Function):
    """``for i: y[i] = a[i] ** b[i]``; da = dy * b * a**(b-1), db = dy * y * log(a)

    As PyTorch: da is 0 wherever b == 0 (the derivative of the constant a**0, though 0 * 0**-1 is NaN), and db is
    0 wherever a == 0 and b >= 0 (y is 0 or 1 there and does not move with b, though log(0) is -inf).
    """

    @staticmethod
    def forward(ctx: Context, a: Any, b: Any) -> Any:
        _shapes(ctx, a, b)
        y = binary("pow", a, b)
        ctx.save_for_backward(a, b, y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any]:
        a, b, y = ctx.saved_tensors
        da = db = None
        zero = scalar(0, dy.dtype)
        if ctx.needs_input_grad[0]:
            b_minus_one = binary("sub", b, scalar(1, b.dtype))
            local = where(binary("eq", b, zero), zero, binary("mul", b, binary("pow", a, b_minus_one)))
            da = unbroadcast(binary("mul", dy, local), ctx.a_shape)
        if ctx.needs_input_grad[1]:
            # Only the exponent's gradient needs log(a), so a constant exponent works for negative bases too.
            local = binary("mul", y, unary("log", a))
            constant = where(binary("eq", a, zero), binary("ge", b, zero), scalar(False, "bool"))
            db = unbroadcast(binary("mul", dy, where(constant, zero, local)), ctx.b_shape)
        return da, db


class Neg(Function):
    """``for i: y[i] = -x[i]``"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        return unary("neg", x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        return unary("neg", dy)


class Exp(Function):
    """``for i: y[i] = exp(x[i])``; dx = dy * y"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        y = unary("exp", x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (y,) = ctx.saved_tensors
        return binary("mul", dy, y)


class Log(Function):
    """``for i: y[i] = log(x[i])``; dx = dy / x"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        ctx.save_for_backward(x)
        return unary("log", x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (x,) = ctx.saved_tensors
        return binary("div", dy, x)


class Sqrt(Function):
    """``for i: y[i] = sqrt(x[i])``; dx = dy / (2 * y)"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        y = unary("sqrt", x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (y,) = ctx.saved_tensors
        return binary("div", dy, binary("add", y, y))


class Tanh(Function):
    """``for i: y[i] = tanh(x[i])``; dx = dy * (1 - y**2)"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        y = unary("tanh", x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (y,) = ctx.saved_tensors
        return binary("mul", dy, binary("sub", scalar(1, y.dtype), binary("mul", y, y)))


class Sigmoid(Function):
    """``for i: y[i] = 1 / (1 + exp(-x[i]))``; dx = dy * y * (1 - y)"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        y = unary("sigmoid", x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (y,) = ctx.saved_tensors
        return binary("mul", dy, binary("mul", y, binary("sub", scalar(1, y.dtype), y)))


class Relu(Function):
    """``for i: y[i] = max(x[i], 0)``; dx = dy where x > 0, else 0"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        ctx.save_for_backward(x)
        return unary("relu", x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (x,) = ctx.saved_tensors
        zero = scalar(0, dy.dtype)
        return where(binary("gt", x, scalar(0, x.dtype)), dy, zero)


class Abs(Function):
    """``for i: y[i] = |x[i]|``; dx = dy * sign(x) (0 at x == 0, as PyTorch)"""

    @staticmethod
    def forward(ctx: Context, x: Any) -> Any:
        ctx.save_for_backward(x)
        return unary("abs", x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> Any:
        (x,) = ctx.saved_tensors
        zero = scalar(0, x.dtype)
        negative_side = where(binary("lt", x, zero), unary("neg", dy), scalar(0, dy.dtype))
        return where(binary("gt", x, zero), dy, negative_side)


class Cast(Function):
    """``for i: y[i] = dtype(x[i])``; the gradient is cast back to x's dtype."""

    @staticmethod
    def forward(ctx: Context, x: Any, dtype: Any) -> Any:
        ctx.x_dtype = x.dtype
        return cast(x, dtype)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        return cast(dy, ctx.x_dtype), None


GELU_SCALE = math.sqrt(2.0 / math.pi)


def gelu(x: Any) -> Any:
    """``gelu(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`` (the tanh form of GELU).

    Written with Tensor operations, so its backward is the chain of theirs: no derivative to write by hand.
    """
    inner = (x + 0.044715 * x * x * x) * GELU_SCALE
    return 0.5 * x * (inner.tanh() + 1.0)
