"""Matrix product with batch broadcasting, and its backward.

For ``y = a @ b`` with ``a`` (..., M, K) and ``b`` (..., K, N)::

    da = dy @ b^T     (..., M, K), summed over the batch dimensions that broadcasting added to a
    db = a^T @ dy     (..., K, N), summed likewise for b

One-dimensional operands are promoted as NumPy does (a vector on the left is a row, on the right a column) by
reshapes around the product, so their gradients come out as vectors again.

The kernels are :mod:`nbcoll.kernels.matmul`'s ``matmul`` and :mod:`nbcoll.kernels.transpose`'s ``transpose``.
This module gives Tensor its ``@`` (``__matmul__`` and ``__rmatmul__``) and holds ``F.matmul``.

Example::

    >>> import nbcoll, nbcoll.functional as F
    >>> a = nbcoll.tensor([[1.0, 2.0]], requires_grad=True)
    >>> y = MatMul.apply(a, nbcoll.tensor([[3.0], [4.0]]))      # what a @ b does for 2-D operands
    >>> y.backward(nbcoll.tensor([[1.0]]))
    >>> y.numpy(), a.grad.numpy()
    (array([[11.]], dtype=float32), array([[3., 4.]], dtype=float32))
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import matmul as matmul_kernels
from nbcoll.kernels.transpose import transpose
from nbcoll.tensors.arrays import unbroadcast
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor, tensor


class MatMul(Function):
    """``for each batch, i, j: y[i, j] = sum over k of a[i, k] * b[k, j]`` (both operands have ndim >= 2)."""

    @staticmethod
    def forward(ctx: Context, a: Any, b: Any) -> Any:
        ctx.a_shape, ctx.b_shape = tuple(a.shape), tuple(b.shape)
        ctx.save_for_backward(a, b)
        return matmul_kernels.matmul(a, b)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, Any]:
        a, b = ctx.saved_tensors
        da = unbroadcast(matmul_kernels.matmul(dy, transpose(b)), ctx.a_shape) if ctx.needs_input_grad[0] else None
        db = unbroadcast(matmul_kernels.matmul(transpose(a), dy), ctx.b_shape) if ctx.needs_input_grad[1] else None
        return da, db


def _matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy's ``a @ b`` on Tensors of one dtype, 1-D operands included: they become matrices around MatMul."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: operands must have at least one dimension, got a.shape={a.shape} and b.shape={b.shape}"
        )
    a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    y = MatMul.apply(a2, b2)
    if a.ndim == 1 and b.ndim == 1:
        return y.reshape(())
    if a.ndim == 1:
        return y.reshape(y.shape[:-2] + y.shape[-1:])
    if b.ndim == 1:
        return y.reshape(y.shape[:-1])
    return y


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy's ``a @ b``: batch dimensions broadcast, 1-D operands are promoted then squeezed (``F.matmul``).

    >>> import nbcoll, nbcoll.functional as F
    >>> F.matmul(nbcoll.tensor([[1.0, 2.0]]), nbcoll.tensor([[3.0], [4.0]])).numpy()
    array([[11.]], dtype=float32)
    """
    a = a if isinstance(a, Tensor) else tensor(a)
    return _matmul(*a._operands(b))


def _operator(self: Tensor, other: Any) -> Tensor:
    return _matmul(*self._operands(other))


def _reflected(self: Tensor, other: Any) -> Tensor:
    a, b = self._operands(other)
    return _matmul(b, a)


Tensor.__matmul__, Tensor.__rmatmul__ = _operator, _reflected
