"""Elementwise math of one tensor: exp, log, sqrt, tanh, sigmoid, relu, abs and gelu, with their derivatives.

Each Function's backward multiplies the incoming gradient by the local derivative, often from the saved output::

    y = exp(x)       dx = dy * y
    y = tanh(x)      dx = dy * (1 - y**2)

The kernels are :mod:`nbcoll.kernels.elementwise`'s ``unary``, ``binary`` and ``where``. After each Function
comes the function that applies it, which is both the Tensor method and the ``F.*`` form (``x.exp()`` and
``F.exp(x)`` are one function, :func:`exp`). ``erf`` is in :mod:`nbcoll.tensors.ops.special`.

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([0.0, 1.0], requires_grad=True)
    >>> y = Exp.apply(x)                          # what x.exp() does
    >>> y.sum().backward()
    >>> x.grad.numpy()
    array([1.      , 2.718282], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

from nbcoll.kernels.elementwise import binary, unary, where
from nbcoll.tensors.arrays import scalar
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


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


def exp(x: Tensor) -> Tensor:
    """``for i: y[i] = exp(x[i])``: ``x.exp()`` or ``F.exp(x)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.exp(nbcoll.tensor([0.0, 1.0])).numpy()
    array([1.      , 2.718282], dtype=float32)
    >>> nbcoll.tensor([0.0]).exp().numpy()
    array([1.], dtype=float32)
    """
    return Exp.apply(x)


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


def log(x: Tensor) -> Tensor:
    """``for i: y[i] = log(x[i])``, the natural logarithm: ``x.log()`` or ``F.log(x)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.log(nbcoll.tensor([1.0, 100.0])).numpy()
    array([0.       , 4.6051702], dtype=float32)
    >>> nbcoll.tensor([1.0]).log().numpy()
    array([0.], dtype=float32)
    """
    return Log.apply(x)


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


def sqrt(x: Tensor) -> Tensor:
    """``for i: y[i] = sqrt(x[i])``: ``x.sqrt()`` or ``F.sqrt(x)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.sqrt(nbcoll.tensor([4.0, 9.0])).numpy()
    array([2., 3.], dtype=float32)
    >>> nbcoll.tensor([4.0, 16.0]).sqrt().numpy()
    array([2., 4.], dtype=float32)
    """
    return Sqrt.apply(x)


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


def tanh(x: Tensor) -> Tensor:
    """``for i: y[i] = tanh(x[i])``: ``x.tanh()`` or ``F.tanh(x)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.tanh(nbcoll.tensor([0.0, 1.0])).numpy()
    array([0.       , 0.7615942], dtype=float32)
    >>> nbcoll.tensor([0.0]).tanh().numpy()
    array([0.], dtype=float32)
    """
    return Tanh.apply(x)


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


def sigmoid(x: Tensor) -> Tensor:
    """``for i: y[i] = 1 / (1 + exp(-x[i]))``: ``x.sigmoid()`` or ``F.sigmoid(x)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.sigmoid(nbcoll.tensor([0.0, 2.0])).numpy()
    array([0.5       , 0.88079715], dtype=float32)
    >>> nbcoll.tensor([0.0]).sigmoid().numpy()
    array([0.5], dtype=float32)
    """
    return Sigmoid.apply(x)


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


def relu(x: Tensor) -> Tensor:
    """``for i: y[i] = max(x[i], 0)``: ``x.relu()`` or ``F.relu(x)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.relu(nbcoll.tensor([-1.0, 2.0])).numpy()
    array([0., 2.], dtype=float32)
    >>> nbcoll.tensor([-1.0, 3.0]).relu().numpy()
    array([0., 3.], dtype=float32)
    """
    return Relu.apply(x)


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


def abs(x: Tensor) -> Tensor:  # noqa: A001 - NumPy's name
    """``for i: y[i] = |x[i]|``; the gradient at 0 is 0: ``x.abs()`` or ``F.abs(x)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.abs(nbcoll.tensor([-1.5, 2.0])).numpy()
    array([1.5, 2. ], dtype=float32)
    >>> nbcoll.tensor([-2.0, 1.0]).abs().numpy()
    array([2., 1.], dtype=float32)
    """
    return Abs.apply(x)


GELU_SCALE = math.sqrt(2.0 / math.pi)


def gelu(x: Tensor) -> Tensor:
    """GELU in its tanh form (PyTorch's ``approximate="tanh"``): ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715
    * x**3)))``, within about 1e-3 of the erf form: ``x.gelu()`` or ``F.gelu(x)``.

    Written with Tensor operations, so its backward is the chain of theirs: no derivative to write by hand.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.gelu(nbcoll.tensor([-1.0, 0.0, 1.0])).numpy()
    array([-0.158808,  0.      ,  0.841192], dtype=float32)
    >>> nbcoll.tensor([0.0, 1.0]).gelu().numpy()
    array([0.      , 0.841192], dtype=float32)
    """
    inner = (x + 0.044715 * x * x * x) * GELU_SCALE
    return 0.5 * x * (inner.tanh() + 1.0)


# The Tensor methods of this module (x.exp() is exp(x)).
Tensor.exp, Tensor.log, Tensor.sqrt, Tensor.tanh = exp, log, sqrt, tanh
Tensor.sigmoid, Tensor.relu, Tensor.abs, Tensor.gelu = sigmoid, relu, abs, gelu
