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
        """The device array (cuda, sim) or ``numpy.ndarray`` (numpy backend) that holds the values."""
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
        return tuple(int(n) for n in self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._data.dtype)

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def requires_grad(self) -> bool:
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
        """True for tensors made by the user rather than by an operation that records a graph."""
        return self.grad_fn is None

    def numpy(self) -> np.ndarray:
        """A host copy of the values as a ``numpy.ndarray``."""
        return memory.to_host(self._data).reshape(self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.numpy()
        return host if dtype is None else host.astype(dtype)

    def item(self) -> Any:
        """The value of a one-element tensor as a Python number."""
        if self.size != 1:
            raise ValueError(f"item(): only one-element tensors can be converted, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
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
        """
        # Imported here because the engine module imports this one.
        from nbcoll.tensors.engine import backward

        backward([self], [grad], retain_graph=retain_graph)

    def detach(self) -> Tensor:
        """A tensor with the same data and no graph: nothing flows back through it."""
        return Tensor._from_array(self._data)

    def zero_grad(self) -> None:
        """Forget the accumulated gradient (``.grad`` becomes None)."""
        self.grad = None

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is complete; a returned Tensor replaces the gradient."""
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that does not require grad")
        hooks = self._hooks if self.grad_fn is None else self.grad_fn.hooks
        hooks.append(hook)
        return RemovableHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> RemovableHandle:
        """For a leaf: call ``hook(tensor)`` after each backward has added into ``tensor.grad``."""
        if self.grad_fn is not None or not self.requires_grad:
            raise RuntimeError("register_post_accumulate_grad_hook: only leaf tensors that require grad have one")
        self._post_accumulate_grad_hooks.append(hook)
        return RemovableHandle(self._post_accumulate_grad_hooks, hook)

    def retain_grad(self) -> None:
        """Keep the gradient of a non-leaf tensor in ``.grad`` too (leaves always keep theirs)."""
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
        return ew.Exp.apply(self)

    def log(self) -> Tensor:
        return ew.Log.apply(self)

    def sqrt(self) -> Tensor:
        return ew.Sqrt.apply(self)

    def tanh(self) -> Tensor:
        return ew.Tanh.apply(self)

    def sigmoid(self) -> Tensor:
        return ew.Sigmoid.apply(self)

    def relu(self) -> Tensor:
        return ew.Relu.apply(self)

    def gelu(self) -> Tensor:
        return ew.gelu(self)

    def abs(self) -> Tensor:
        return ew.Abs.apply(self)

    def clip(self, lo: Any = None, hi: Any = None) -> Tensor:
        """``for i: y[i] = min(max(x[i], lo), hi)``; a bound left None is not applied; the bounds are numbers."""
        return select.clip(self, lo, hi)

    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        """``for i: y[i] = value if mask[i] else x[i]``; ``mask`` is a bool Tensor that broadcasts to x's shape."""
        return select.masked_fill(self, mask, value)

    def astype(self, dtype: Any) -> Tensor:
        """A copy converted to ``dtype`` (NumPy's ``astype``); gradients flow back between floating dtypes."""
        return ew.Cast.apply(self, memory.check_dtype(dtype, "dtype", allow_bool=True))

    # -- reductions --------------------------------------------------------------------------------------------

    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return reductions.Sum.apply(self, axis, keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return reductions.Mean.apply(self, axis, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return reductions.Extremum.apply(self, "max", axis, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return reductions.Extremum.apply(self, "min", axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index of the first maximum (int64, no gradient); over the flattened tensor when ``axis`` is None."""
        return Tensor._from_array(reduce("argmax", self._data, axis=axis, keepdims=keepdims))

    def softmax(self, axis: int = -1) -> Tensor:
        return softmax_ops.Softmax.apply(self, axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return softmax_ops.LogSoftmax.apply(self, axis)

    # -- shape -------------------------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> Tensor:
        """``reshape(2, -1)`` or ``reshape((2, -1))``, as NumPy."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return shape_ops.Reshape.apply(self, tuple(int(n) for n in shape))

    def flatten(self) -> Tensor:
        return self.reshape(-1)

    def transpose(self, *axes: Any) -> Tensor:
        """``transpose()`` reverses the axes; ``transpose(1, 0, 2)`` or ``transpose((1, 0, 2))`` permutes them."""
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(self.ndim - 1, -1, -1))
        return shape_ops.Permute.apply(self, shape_ops.check_permutation(axes, self.ndim))

    def permute(self, *axes: Any) -> Tensor:
        """``permute(1, 0, 2)`` or ``permute((1, 0, 2))``: the same as ``transpose`` with axes (PyTorch's name)."""
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        return shape_ops.Permute.apply(self, shape_ops.check_permutation(axes, self.ndim))

    def split(self, sizes_or_sections: Any, axis: int = 0) -> tuple[Tensor, ...]:
        """Pieces along ``axis``: a list gives their lengths, an int the number of equal pieces (``np.split``)."""
        return join.split(self, sizes_or_sections, axis)

    @property
    def T(self) -> Tensor:  # noqa: N802 - NumPy's name
        """The tensor with its axes reversed, as NumPy's ``.T``."""
        return self.transpose()

    # -- indexing ----------------------------------------------------------------------------------------------

    def gather(self, index: Any, axis: int) -> Tensor:
        """``out[i][j] = self[index[i][j]][j]`` for ``axis=0`` (torch.gather); ``out`` has index's shape."""
        return indexing.Gather.apply(self, _index_array(index), axis)

    def scatter_add(self, index: Any, src: Tensor, axis: int) -> Tensor:
        """A copy of self with ``src[i][j]`` added at ``[index[i][j]][j]`` for ``axis=0``."""
        return indexing.ScatterAdd.apply(self, _index_array(index), self._operand(src), axis)

    def index_select(self, axis: int, index: Any) -> Tensor:
        """``np.take(self, index, axis)`` for a 1-D integer index."""
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
