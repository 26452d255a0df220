"""Arithmetic: ``+ - * / **`` and unary ``-`` (with their derivatives and NumPy broadcasting), and the comparisons.

Each backward multiplies the incoming gradient by the local derivative, then sums it back to the input's shape
where broadcasting stretched the input (``unbroadcast``)::

    y = a * b        da = unbroadcast(dy * b, a.shape)     db = unbroadcast(dy * a, b.shape)

The kernels are :mod:`nbcoll.kernels.elementwise`'s ``binary`` and ``unary``. This module gives
:class:`~nbcoll.tensors.tensor.Tensor` its operators (``a + b`` is ``Add.apply(a, b)`` once both are in one dtype,
``2 - a`` is ``Sub.apply(2, a)``), and holds the ``F.add`` ... ``F.neg`` forms of :mod:`nbcoll.functional`.
Comparisons (``==``, ``<``, ...) give bool Tensors, which carry no gradient: they call the kernel directly.

Example::

    >>> import nbcoll, nbcoll.functional as F
    >>> a = nbcoll.tensor([1.0, 2.0], requires_grad=True)
    >>> y = Mul.apply(a, a)                       # what a * a does
    >>> y.backward(nbcoll.tensor([1.0, 1.0]))
    >>> a.grad.numpy(), F.add(a, 1).numpy(), (a > 1.5).numpy()
    (array([2., 4.], dtype=float32), array([2., 3.], dtype=float32), array([False,  True]))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbcoll.kernels.elementwise import binary, unary, where
from nbcoll.tensors.arrays import scalar, unbroadcast
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor, tensor


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


# -- the operators on Tensor ------------------------------------------------------------------------------------


def _binary_operator(function: type[Function], true_division: bool = False) -> tuple[Callable, Callable]:
    """``a op b`` and its reflected form ``b op a`` (``2 - x``): both operands in one dtype, then ``apply``."""

    def operator(self: Tensor, other: Any) -> Tensor:
        return function.apply(*self._operands(other, true_division=true_division))

    def reflected(self: Tensor, other: Any) -> Tensor:
        a, b = self._operands(other, true_division=true_division)
        return function.apply(b, a)

    return operator, reflected


def _comparison(op: str) -> Callable:
    """``a op b`` for ``op`` in eq, ne, lt, le, gt, ge: a bool Tensor, outside the graph."""

    def compare(self: Tensor, other: Any) -> Tensor:
        a, b = self._operands(other)
        return self._wrap(binary(op, a.data, b.data))

    return compare


def _neg(self: Tensor) -> Tensor:
    return Neg.apply(self)


def _pos(self: Tensor) -> Tensor:
    return self


Tensor.__add__, Tensor.__radd__ = _binary_operator(Add)
Tensor.__sub__, Tensor.__rsub__ = _binary_operator(Sub)
Tensor.__mul__, Tensor.__rmul__ = _binary_operator(Mul)
Tensor.__truediv__, Tensor.__rtruediv__ = _binary_operator(Div, true_division=True)
Tensor.__pow__, Tensor.__rpow__ = _binary_operator(Pow)
Tensor.__neg__, Tensor.__pos__ = _neg, _pos
Tensor.__eq__, Tensor.__ne__ = _comparison("eq"), _comparison("ne")
Tensor.__lt__, Tensor.__le__ = _comparison("lt"), _comparison("le")
Tensor.__gt__, Tensor.__ge__ = _comparison("gt"), _comparison("ge")


# -- the F.* forms ------------------------------------------------------------------------------------------------


def _tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def add(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] + b[i]``, broadcasting; ``a + b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.add(nbcoll.tensor([1.0, 2.0]), 10).numpy()
    array([11., 12.], dtype=float32)
    """
    return _tensor(a) + b


def sub(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] - b[i]``, broadcasting; ``a - b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.sub(nbcoll.tensor([1.0, 2.0]), nbcoll.tensor([0.5, 0.5])).numpy()
    array([0.5, 1.5], dtype=float32)
    """
    return _tensor(a) - b


def mul(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] * b[i]``, broadcasting; ``a * b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.mul(nbcoll.tensor([[1.0], [2.0]]), nbcoll.tensor([1.0, 10.0])).numpy()
    array([[ 1., 10.],
           [ 2., 20.]], dtype=float32)
    """
    return _tensor(a) * b


def div(a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] / b[i]``, broadcasting; ``a / b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.div(nbcoll.tensor([1.0, 3.0]), 2).numpy()
    array([0.5, 1.5], dtype=float32)
    """
    return _tensor(a) / b


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - the operator's name
    """``for i: y[i] = a[i] ** b``; ``a ** b`` on Tensors.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.pow(nbcoll.tensor([2.0, 3.0]), 2).numpy()
    array([4., 9.], dtype=float32)
    """
    return _tensor(a) ** b


def neg(x: Tensor) -> Tensor:
    """``for i: y[i] = -x[i]``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.neg(nbcoll.tensor([1.0, -2.0])).numpy()
    array([-1.,  2.], dtype=float32)
    """
    return -x
