"""The Tensor: a device array of the current backend, plus what autograd needs (grad, grad_fn, hooks).

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad.numpy()
    array([[2., 4.],
           [6., 8.]], dtype=float32)

Every numeric operation runs a kernel launch function of ``nbcoll.kernels``; a Tensor method only checks its
arguments, keeps the shape bookkeeping, and applies the matching ``Function`` of ``nbcoll.tensors.ops``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels.elementwise import binary
from nbcoll.kernels.reduce_axes import reduce
from nbcoll.tensors import dtypes
from nbcoll.tensors.arrays import from_host
from nbcoll.tensors.function import Context
from nbcoll.tensors.ops import elementwise as ew
from nbcoll.tensors.ops import indexing, join, matmul, select
from nbcoll.tensors.ops import reduce as reductions
from nbcoll.tensors.ops import shape as shape_ops
from nbcoll.tensors.ops import softmax as softmax_ops


class RemovableHandle:
    """What ``register_hook`` returns: ``handle.remove()`` takes the hook off again.

    Example::

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
        >>> handle = x.register_hook(lambda grad: print("gradient", grad.numpy()))
        >>> (x * 3).sum().backward()
        gradient [3. 3.]
        >>> handle.remove()
        >>> (x * 3).sum().backward()       # the hook is gone: nothing printed
    """

    def __init__(self, hooks: list[Any], hook: Any) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        """Unregister the hook; removing it twice is harmless.

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0], requires_grad=True)
        >>> handle = x.register_hook(lambda grad: print("seen"))
        >>> handle.remove()
        >>> x.sum().backward()                         # nothing printed
        """
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def _host_data(data: Any, dtype: Any) -> np.ndarray:
    """Python data as a host array: Python floats take the default dtype (float32) and Python ints int64."""
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        return np.asarray(data, dtype=dtype)
    host = np.asarray(data)
    if dtype is None and host.dtype == np.float64:
        host = host.astype(dtypes.get_default_dtype())
    return np.asarray(host, dtype=dtype)


class Tensor:
    """An n-dimensional array on the current backend that can record the operations applied to it.

    Example::

        >>> import numpy as np
        >>> x = Tensor(np.full((4, 3), 0.5, np.float32))
        >>> w = Tensor(np.ones((3, 2), np.float32), requires_grad=True)
        >>> loss = (x @ w).relu().mean()
        >>> loss.backward()             # w.grad holds d loss / d w
        >>> w.grad.numpy()
        array([[0.25, 0.25],
               [0.25, 0.25],
               [0.25, 0.25]], dtype=float32)
    """

    # NumPy operands (a float64 scalar * Tensor) defer to Tensor's reflected operators.
    __array_priority__ = 1000

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None) -> None:
        if isinstance(data, Tensor):
            data = data.data
        on_device = not isinstance(data, np.ndarray) and memory.is_device_array(data)
        if on_device and (dtype is None or np.dtype(dtype) == data.dtype):
            array = data  # a device array of this backend is wrapped, not copied
        else:
            host = memory.to_host(data) if memory.array_backend(data) in ("cuda", "sim") else data
            array = from_host(_host_data(host, dtype))
        self._init(array, None)
        self.requires_grad = requires_grad

    def _init(self, array: Any, grad_fn: Context | None) -> None:
        memory.check_dtype(array.dtype, "data.dtype", allow_bool=True)
        self._data = memory.track(array)  # counted once in memory.stats(), whoever allocated it
        self._requires_grad = False
        self.grad_fn = grad_fn
        self.grad: Tensor | None = None
        self._hooks: list[Any] = []
        self._post_accumulate_grad_hooks: list[Any] = []

    @classmethod
    def _from_array(cls, array: Any, requires_grad: bool = False, grad_fn: Context | None = None) -> Tensor:
        """Wrap a device array of the current backend without copying it."""
        t = cls.__new__(cls)
        t._init(array, grad_fn)
        t._requires_grad = requires_grad
        return t

    # -- data and metadata -------------------------------------------------------------------------------------

    @property
    def data(self) -> Any:
        """The device array (cuda, sim) or ``numpy.ndarray`` (numpy backend) that holds the values.

        >>> import nbcoll
        >>> nbcoll.tensor([1.0, 2.0]).data          # on the numpy backend, a numpy.ndarray
        array([1., 2.], dtype=float32)
        """
        return self._data

    @data.setter
    def data(self, array: Any) -> None:
        array = memory.as_device_array(array, "data")
        if tuple(array.shape) != self.shape or array.dtype != self.dtype:
            raise ValueError(
                f"data: expected shape {self.shape} and dtype {self.dtype}, got {tuple(array.shape)} and {array.dtype}"
            )
        self._data = memory.track(array)

    @property
    def shape(self) -> tuple[int, ...]:
        """The length of each axis, as NumPy's ``shape``.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0, 3.0]]).shape
        (1, 3)
        """
        return tuple(int(n) for n in self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of the elements.

        >>> import nbcoll
        >>> nbcoll.tensor([1.0]).dtype, nbcoll.tensor([1]).dtype
        (dtype('float32'), dtype('int64'))
        """
        return np.dtype(self._data.dtype)

    @property
    def ndim(self) -> int:
        """The number of axes.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0]]).ndim
        2
        """
        return len(self._data.shape)

    @property
    def size(self) -> int:
        """The number of elements (NumPy's ``size``, not PyTorch's ``size()``).

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).size
        6
        """
        return int(np.prod(self.shape))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def requires_grad(self) -> bool:
        """Whether operations on this tensor record a graph so that ``backward`` reaches it; set it on leaves only.

        >>> import nbcoll
        >>> w = nbcoll.tensor([1.0])
        >>> w.requires_grad = True
        >>> (w * 2).requires_grad
        True
        """
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None and not value:
            raise RuntimeError("requires_grad: only leaf tensors can stop requiring grad; use detach() instead")
        if value and self.dtype.kind != "f":
            raise TypeError(f"requires_grad: only floating tensors can require gradients, this one is {self.dtype}")
        self._requires_grad = bool(value)

    @property
    def is_leaf(self) -> bool:
        """True for tensors made by the user rather than by an operation that records a graph.

        >>> import nbcoll
        >>> w = nbcoll.tensor([1.0], requires_grad=True)
        >>> w.is_leaf, (w * 2).is_leaf
        (True, False)
        """
        return self.grad_fn is None

    def numpy(self) -> np.ndarray:
        """A host copy of the values as a ``numpy.ndarray``.

        >>> import nbcoll
        >>> nbcoll.tensor([1.0, 2.0]).numpy()
        array([1., 2.], dtype=float32)
        """
        return memory.to_host(self._data).reshape(self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.numpy()
        return host if dtype is None else host.astype(dtype)

    def item(self) -> Any:
        """The value of a one-element tensor as a Python number.

        >>> import nbcoll
        >>> nbcoll.tensor([[2.5]]).item()
        2.5
        """
        if self.size != 1:
            raise ValueError(f"item(): only one-element tensors can be converted, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        """The values as nested Python lists of Python numbers.

        >>> import nbcoll
        >>> nbcoll.tensor([[1, 2], [3, 4]]).tolist()
        [[1, 2], [3, 4]]
        """
        return self.numpy().tolist()

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extras = ""
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.bool_)):
            extras += f", dtype={self.dtype}"
        if self.grad_fn is not None:
            extras += f", grad_fn={self.grad_fn!r}"
        elif self.requires_grad:
            extras += ", requires_grad=True"
        return f"tensor({body}{extras})"

    # -- autograd ----------------------------------------------------------------------------------------------

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Add d(self)/d(leaf) into ``.grad`` of every leaf this tensor depends on.

        ``grad`` is the gradient flowing into ``self``; it may be left out only when ``self`` has one element.

        >>> import nbcoll
        >>> x = nbcoll.tensor([3.0], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad.numpy()                        # d(x^2)/dx = 2x
        array([6.], dtype=float32)
        """
        # Imported here because the engine module imports this one.
        from nbcoll.tensors.engine import backward

        backward([self], [grad], retain_graph=retain_graph)

    def detach(self) -> Tensor:
        """A tensor with the same data and no graph: nothing flows back through it.

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0], requires_grad=True)
        >>> y = (x * 2).detach()
        >>> y.requires_grad, y.numpy()
        (False, array([2.], dtype=float32))
        """
        return Tensor._from_array(self._data)

    def zero_grad(self) -> None:
        """Forget the accumulated gradient (``.grad`` becomes None).

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0], requires_grad=True)
        >>> (x * 2).sum().backward()
        >>> x.zero_grad()
        >>> print(x.grad)
        None
        """
        self.grad = None

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is complete; a returned Tensor replaces the gradient.

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
        >>> handle = x.register_hook(lambda grad: grad * 10)     # scale the gradient on its way in
        >>> x.sum().backward()
        >>> x.grad.numpy()
        array([10., 10.], dtype=float32)
        """
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that does not require grad")
        hooks = self._hooks if self.grad_fn is None else self.grad_fn.hooks
        hooks.append(hook)
        return RemovableHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> RemovableHandle:
        """For a leaf: call ``hook(tensor)`` after each backward has added into ``tensor.grad``.

        >>> import nbcoll
        >>> w = nbcoll.tensor([1.0, 2.0], requires_grad=True)
        >>> handle = w.register_post_accumulate_grad_hook(lambda t: print("grad ready:", t.grad.numpy()))
        >>> (w * 3).sum().backward()
        grad ready: [3. 3.]
        """
        if self.grad_fn is not None or not self.requires_grad:
            raise RuntimeError("register_post_accumulate_grad_hook: only leaf tensors that require grad have one")
        self._post_accumulate_grad_hooks.append(hook)
        return RemovableHandle(self._post_accumulate_grad_hooks, hook)

    def retain_grad(self) -> None:
        """Keep the gradient of a non-leaf tensor in ``.grad`` too (leaves always keep theirs).

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
        >>> hidden = x * 2
        >>> hidden.retain_grad()
        >>> (hidden * hidden).sum().backward()
        >>> hidden.grad.numpy()                  # d(h^2)/dh = 2h
        array([4., 8.], dtype=float32)
        """
        if self.grad_fn is None:
            return

        def keep(grad: Tensor) -> None:
            self.grad = grad if self.grad is None else Tensor._from_array(binary("add", self.grad.data, grad.data))

        self.register_hook(keep)

    # -- operators ---------------------------------------------------------------------------------------------

    def _operand(self, other: Any) -> Tensor:
        """``other`` as a Tensor: a Tensor must have this tensor's dtype; Python and NumPy scalars (and lists)
        take the dtype that :func:`~nbcoll.tensors.dtypes.scalar_result_dtype` gives them with this tensor."""
        if isinstance(other, Tensor):
            if other.dtype != self.dtype:
                raise TypeError(
                    f"operands must have the same dtype, got {self.dtype} and {other.dtype}; convert one first"
                )
            return other
        return Tensor(np.asarray(other, dtype=dtypes.scalar_result_dtype(self.dtype, other)))

    def _operands(self, other: Any, true_division: bool = False) -> tuple[Tensor, Tensor]:
        """``(self, other)`` converted to one dtype by PyTorch's rule (``int tensor * 0.5`` is a float tensor)."""
        b = self._operand(other)
        a = self if b.dtype == self.dtype else self.astype(b.dtype)
        if true_division and a.dtype.kind != "f":
            dtype = dtypes.true_division_dtype(a.dtype)
            a, b = a.astype(dtype), b.astype(dtype)
        return a, b

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
        return Tensor._from_array(binary(op, a.data, b.data))

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
        return shape_ops.getitem(self, key)

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

        >>> import nbcoll
        >>> nbcoll.tensor([1.7, -1.7]).astype("int32").numpy()
        array([ 1, -1], dtype=int32)
        """
        return ew.Cast.apply(self, memory.check_dtype(dtype, "dtype", allow_bool=True))

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
        return Tensor._from_array(reduce("argmax", self._data, axis=axis, keepdims=keepdims))

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

    # -- shape -------------------------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> Tensor:
        """``reshape(2, -1)`` or ``reshape((2, -1))``, as NumPy.

        >>> import nbcoll
        >>> nbcoll.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(2, -1).shape
        (2, 3)
        """
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return shape_ops.Reshape.apply(self, tuple(int(n) for n in shape))

    def flatten(self) -> Tensor:
        """The elements as one axis, in row-major order.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).flatten().numpy()
        array([1., 2., 3., 4.], dtype=float32)
        """
        return self.reshape(-1)

    def transpose(self, *axes: Any) -> Tensor:
        """``transpose()`` reverses the axes; ``transpose(1, 0, 2)`` or ``transpose((1, 0, 2))`` permutes them.

        >>> import nbcoll
        >>> x = nbcoll.tensor([[[1.0, 2.0, 3.0]]])
        >>> x.transpose().shape, x.transpose(1, 0, 2).shape
        ((3, 1, 1), (1, 1, 3))
        """
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(self.ndim - 1, -1, -1))
        return shape_ops.Permute.apply(self, shape_ops.check_permutation(axes, self.ndim))

    def permute(self, *axes: Any) -> Tensor:
        """``permute(1, 0, 2)`` or ``permute((1, 0, 2))``: the same as ``transpose`` with axes (PyTorch's name).

        >>> import nbcoll
        >>> nbcoll.tensor([[[1.0, 2.0, 3.0]]]).permute(2, 0, 1).shape
        (3, 1, 1)
        """
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        return shape_ops.Permute.apply(self, shape_ops.check_permutation(axes, self.ndim))

    def split(self, sizes_or_sections: Any, axis: int = 0) -> tuple[Tensor, ...]:
        """Pieces along ``axis``: a list gives their lengths, an int the number of equal pieces (``np.split``).

        >>> import nbcoll
        >>> [piece.tolist() for piece in nbcoll.tensor([1.0, 2.0, 3.0, 4.0]).split(2)]
        [[1.0, 2.0], [3.0, 4.0]]
        """
        return join.split(self, sizes_or_sections, axis)

    @property
    def T(self) -> Tensor:  # noqa: N802 - NumPy's name
        """The tensor with its axes reversed, as NumPy's ``.T``.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0]]).T.numpy()
        array([[1.],
               [2.]], dtype=float32)
        """
        return self.transpose()

    # -- indexing ----------------------------------------------------------------------------------------------

    def gather(self, index: Any, axis: int) -> Tensor:
        """``out[i][j] = self[index[i][j]][j]`` for ``axis=0`` (torch.gather); ``out`` has index's shape.

        >>> import nbcoll
        >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> x.gather(nbcoll.tensor([[1, 0]]), axis=0).numpy()        # out[0][j] = x[index[0][j]][j]
        array([[3., 2.]], dtype=float32)
        """
        return indexing.Gather.apply(self, _index_array(index), axis)

    def scatter_add(self, index: Any, src: Tensor, axis: int) -> Tensor:
        """A copy of self with ``src[i][j]`` added at ``[index[i][j]][j]`` for ``axis=0``.

        >>> import nbcoll
        >>> x = nbcoll.tensor([[0.0, 0.0], [0.0, 0.0]])
        >>> x.scatter_add(nbcoll.tensor([[1, 1]]), nbcoll.tensor([[5.0, 6.0]]), axis=0).numpy()
        array([[0., 0.],
               [5., 6.]], dtype=float32)
        """
        return indexing.ScatterAdd.apply(self, _index_array(index), self._operand(src), axis)

    def index_select(self, axis: int, index: Any) -> Tensor:
        """``np.take(self, index, axis)`` for a 1-D integer index.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).index_select(1, [1, 1, 0]).numpy()
        array([[2., 2., 1.],
               [4., 4., 3.]], dtype=float32)
        """
        return shape_ops.IndexSelect.apply(self, axis, _index_array(index))


def _index_array(index: Any) -> Any:
    """An index argument (Tensor, device array, NumPy array or list of ints) as a device array."""
    if isinstance(index, Tensor):
        return index.data
    if memory.is_device_array(index):
        return index
    host = np.asarray(index)
    if host.dtype.kind not in "iu":
        raise TypeError(f"index: expected integers, got dtype {host.dtype}")
    return from_host(host)


def tensor(data: Any, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    """A new Tensor holding ``data`` (nested lists, a NumPy array, a device array or a Tensor) on the current backend.

    Python floats take the default dtype (float32) and Python ints int64 unless ``dtype`` says otherwise.

    Example::

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x.dtype, x.shape, x.requires_grad
        (dtype('float32'), (3,), True)
    """
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


__all__ = ["RemovableHandle", "Tensor", "tensor"]
