"""The Tensor's operators and math methods: each converts its operands and applies a ``Function`` of the ops.

:class:`TensorMethods` is the part of :class:`~nbcoll.tensors.tensor.Tensor` that computes: ``+``, ``@``, ``==``,
``exp``, ``sum``, ``softmax``... Every method here only checks its arguments, keeps the shape bookkeeping, and
calls ``apply`` of the matching ``Function`` in :mod:`nbcoll.tensors.ops`, which runs a kernel launch function of
``nbcoll.kernels`` and records the backward. The reshaping and indexing methods are in
:mod:`nbcoll.tensors.shape_methods`; the rest, in ``tensor.py``, holds the data, the gradient and the hooks, and
converts operands (``_operands``) to one dtype.

Example::

    >>> import nbcoll
    >>> from nbcoll.tensors.methods import TensorMethods
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> isinstance(x, TensorMethods), (x @ x.T).sum(axis=1).numpy()
    (True, array([16., 36.], dtype=float32))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nbcoll import memory
from nbcoll.kernels.elementwise import binary
from nbcoll.kernels.low_precision import is_low_precision
from nbcoll.kernels.reduce_axes import reduce
from nbcoll.tensors.ops import elementwise as ew
from nbcoll.tensors.ops import getitem as getitem_ops
from nbcoll.tensors.ops import matmul, select
from nbcoll.tensors.ops import reduce as reductions
from nbcoll.tensors.ops import softmax as softmax_ops
from nbcoll.tensors.ops.cast_low_precision import CastLowPrecision

if TYPE_CHECKING:
    from nbcoll.tensors.tensor import Tensor


class TensorMethods:
    """Operators and methods of :class:`~nbcoll.tensors.tensor.Tensor`, which is the only class that uses it.

    It relies on the Tensor's ``_operand``/``_operands`` (operands in one dtype), ``_wrap`` (a new Tensor outside
    the graph), ``astype``, ``item``, ``shape``, ``dtype`` and ``_data``.

    >>> import nbcoll
    >>> (nbcoll.tensor([1, 2]) * 0.5).numpy()       # int tensor * float: a float tensor, as in PyTorch
    array([0.5, 1. ], dtype=float32)
    """

    # -- operators ---------------------------------------------------------------------------------------------

    def __add__(self, other: Any) -> Tensor:
        return ew.Add.apply(*self._operands(other))

    def __radd__(self, other: Any) -> Tensor:
        a, b = self._operands(other)
        return ew.Add.apply(b, a)

    def __sub__(self, other: Any) -> Tensor:
        return ew.Sub.apply(*self._operands(other))

    def __rsub__(self, other: Any) -> Tensor:
        a, b = self._operands(other)
        return ew.Sub.apply(b, a)

    def __mul__(self, other: Any) -> Tensor:
        return ew.Mul.apply(*self._operands(other))

    def __rmul__(self, other: Any) -> Tensor:
        a, b = self._operands(other)
        return ew.Mul.apply(b, a)

    def __truediv__(self, other: Any) -> Tensor:
        return ew.Div.apply(*self._operands(other, true_division=True))

    def __rtruediv__(self, other: Any) -> Tensor:
        a, b = self._operands(other, true_division=True)
        return ew.Div.apply(b, a)

    def __pow__(self, other: Any) -> Tensor:
        return ew.Pow.apply(*self._operands(other))

    def __rpow__(self, other: Any) -> Tensor:
        a, b = self._operands(other)
        return ew.Pow.apply(b, a)

    def __matmul__(self, other: Any) -> Tensor:
        return matmul.matmul(*self._operands(other))

    def __rmatmul__(self, other: Any) -> Tensor:
        a, b = self._operands(other)
        return matmul.matmul(b, a)

    def __neg__(self) -> Tensor:
        return ew.Neg.apply(self)

    def __pos__(self) -> Tensor:
        return self

    def _compare(self, op: str, other: Any) -> Tensor:
        a, b = self._operands(other)
        return self._wrap(binary(op, a.data, b.data))

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare("eq", other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare("ne", other)

    def __lt__(self, other: Any) -> Tensor:
        return self._compare("lt", other)

    def __le__(self, other: Any) -> Tensor:
        return self._compare("le", other)

    def __gt__(self, other: Any) -> Tensor:
        return self._compare("gt", other)

    def __ge__(self, other: Any) -> Tensor:
        return self._compare("ge", other)

    # Tensors compare elementwise, yet stay usable as dict keys and set members (optimizer state), by identity.
    __hash__ = object.__hash__

    def __iter__(self) -> Iterator[Tensor]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self) -> bool:
        return bool(self.item())

    def __getitem__(self, key: Any) -> Tensor:
        return getitem_ops.getitem(self, key)

    # -- elementwise methods -----------------------------------------------------------------------------------

    def exp(self) -> Tensor:
        """``for i: y[i] = exp(x[i])``.

        >>> import nbcoll
        >>> nbcoll.tensor([0.0, 1.0]).exp().numpy()
        array([1.      , 2.718282], dtype=float32)
        """
        return ew.Exp.apply(self)

    def log(self) -> Tensor:
        """``for i: y[i] = log(x[i])``.

        >>> import nbcoll
        >>> nbcoll.tensor([1.0]).log().numpy()
        array([0.], dtype=float32)
        """
        return ew.Log.apply(self)

    def sqrt(self) -> Tensor:
        """``for i: y[i] = sqrt(x[i])``.

        >>> import nbcoll
        >>> nbcoll.tensor([4.0, 16.0]).sqrt().numpy()
        array([2., 4.], dtype=float32)
        """
        return ew.Sqrt.apply(self)

    def tanh(self) -> Tensor:
        """``for i: y[i] = tanh(x[i])``.

        >>> import nbcoll
        >>> nbcoll.tensor([0.0]).tanh().numpy()
        array([0.], dtype=float32)
        """
        return ew.Tanh.apply(self)

    def sigmoid(self) -> Tensor:
        """``for i: y[i] = 1 / (1 + exp(-x[i]))``.

        >>> import nbcoll
        >>> nbcoll.tensor([0.0]).sigmoid().numpy()
        array([0.5], dtype=float32)
        """
        return ew.Sigmoid.apply(self)

    def relu(self) -> Tensor:
        """``for i: y[i] = max(x[i], 0)``.

        >>> import nbcoll
        >>> nbcoll.tensor([-1.0, 3.0]).relu().numpy()
        array([0., 3.], dtype=float32)
        """
        return ew.Relu.apply(self)

    def gelu(self) -> Tensor:
        """GELU in its tanh form, as :func:`nbcoll.functional.gelu`.

        >>> import nbcoll
        >>> nbcoll.tensor([0.0, 1.0]).gelu().numpy()
        array([0.      , 0.841192], dtype=float32)
        """
        return ew.gelu(self)

    def abs(self) -> Tensor:
        """``for i: y[i] = |x[i]|``.

        >>> import nbcoll
        >>> nbcoll.tensor([-2.0, 1.0]).abs().numpy()
        array([2., 1.], dtype=float32)
        """
        return ew.Abs.apply(self)

    def clip(self, lo: Any = None, hi: Any = None) -> Tensor:
        """``for i: y[i] = min(max(x[i], lo), hi)``; a bound left None is not applied; the bounds are numbers.

        >>> import nbcoll
        >>> nbcoll.tensor([-5.0, 0.5, 5.0]).clip(0, 1).numpy()
        array([0. , 0.5, 1. ], dtype=float32)
        """
        return select.clip(self, lo, hi)

    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        """``for i: y[i] = value if mask[i] else x[i]``; ``mask`` is a bool Tensor that broadcasts to x's shape.

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0, 2.0, 3.0])
        >>> x.masked_fill(x > 1.5, 0.0).numpy()
        array([1., 0., 0.], dtype=float32)
        """
        return select.masked_fill(self, mask, value)

    def astype(self, dtype: Any) -> Tensor:
        """A copy converted to ``dtype`` (NumPy's ``astype``); gradients flow back between floating dtypes.

        bfloat16, float8_e4m3fn and float8_e5m2 convert through float32, rounding to nearest even (``ml_dtypes``'
        rules: see :mod:`nbcoll.kernels.low_precision`).

        >>> import nbcoll
        >>> nbcoll.tensor([1.7, -1.7]).astype("int32").numpy()
        array([ 1, -1], dtype=int32)
        >>> nbcoll.tensor([1.7, -1.7]).astype(nbcoll.bfloat16).numpy().tolist()
        [1.703125, -1.703125]
        """
        dtype = memory.check_dtype(dtype, "dtype", allow_bool=True)
        if is_low_precision(dtype) or is_low_precision(self.dtype):
            return CastLowPrecision.apply(self, dtype)
        return ew.Cast.apply(self, dtype)

    # -- reductions --------------------------------------------------------------------------------------------

    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Sum over ``axis`` (every axis when None); ``keepdims`` keeps the summed axes with length 1.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).sum(axis=1, keepdims=True).numpy()
        array([[3.],
               [7.]], dtype=float32)
        """
        return reductions.Sum.apply(self, axis, keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Mean over ``axis`` (every axis when None).

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).mean().item()
        2.5
        """
        return reductions.Mean.apply(self, axis, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Largest element over ``axis`` (every axis when None); ties share the gradient.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 7.0], [3.0, 4.0]]).max(axis=0).numpy()
        array([3., 7.], dtype=float32)
        """
        return reductions.Extremum.apply(self, "max", axis, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Smallest element over ``axis`` (every axis when None); ties share the gradient.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 7.0], [3.0, 4.0]]).min().item()
        1.0
        """
        return reductions.Extremum.apply(self, "min", axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index of the first maximum (int64, no gradient); over the flattened tensor when ``axis`` is None.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 7.0, 7.0], [9.0, 4.0, 0.0]]).argmax(axis=1).numpy()
        array([1, 0])
        """
        return self._wrap(reduce("argmax", self._data, axis=axis, keepdims=keepdims))

    def softmax(self, axis: int = -1) -> Tensor:
        """``y[i] = exp(x[i]) / sum_j exp(x[j])`` along ``axis``.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 1.0]]).softmax().numpy()
        array([[0.5, 0.5]], dtype=float32)
        """
        return softmax_ops.Softmax.apply(self, axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        """``y[i] = x[i] - log(sum_j exp(x[j]))`` along ``axis``.

        >>> import nbcoll
        >>> nbcoll.tensor([1.0, 1.0]).log_softmax().numpy()
        array([-0.6931472, -0.6931472], dtype=float32)
        """
        return softmax_ops.LogSoftmax.apply(self, axis)
