"""The Tensor's core: a device array of the current backend, plus what autograd needs (grad, grad_fn, hooks).

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad.numpy()
    array([[2., 4.],
           [6., 8.]], dtype=float32)

This file holds the data, the gradient, the hooks and the conversion of operands to one dtype; it imports no
operation. Each operation is written in the module of its family in :mod:`nbcoll.tensors.ops` (its ``Function``,
forward and backward side by side, then the Tensor method and the ``F.*`` form that apply it), and that module
adds the method to this class (``Tensor.exp = exp``); :mod:`nbcoll.tensors` imports them all, so a Tensor always
has every method. ``backward`` comes from :mod:`nbcoll.tensors.engine` and ``__dlpack__`` from
:mod:`nbcoll.interop` in the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels.elementwise import binary
from nbcoll.tensors import dtypes
from nbcoll.tensors.arrays import from_host
from nbcoll.tensors.autocast_state import active_autocast
from nbcoll.tensors.hook_handle import RemovableHandle

if TYPE_CHECKING:
    from nbcoll.tensors.function import Context


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

    # Tensors compare elementwise (ops/arithmetic.py), yet stay usable as dict keys and set members (optimizer
    # state), by identity.
    __hash__ = object.__hash__

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

    def __iter__(self) -> Iterator[Tensor]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self) -> bool:
        return bool(self.item())

    @property
    def requires_grad(self) -> bool:
        """Whether operations on this tensor record a graph so that ``backward`` reaches it; set it on leaves only.

        Floating tensors only: float16/32/64, and bfloat16 and fp8, whose gradient (of their dtype) comes back
        through ``astype``.

        >>> import nbcoll
        >>> w = nbcoll.tensor([1.0])
        >>> w.requires_grad = True
        >>> (w * 2).requires_grad
        True
        >>> b = nbcoll.tensor([1.0, 2.0]).astype(nbcoll.bfloat16)
        >>> b.requires_grad = True
        >>> (b.astype("float32") * 3).sum().backward()
        >>> b.grad.dtype, b.grad.numpy().tolist()
        (dtype(bfloat16), [3.0, 3.0])
        """
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None and not value:
            raise RuntimeError("requires_grad: only leaf tensors can stop requiring grad; use detach() instead")
        if value and self.dtype.kind != "f" and self.dtype not in memory.WORD_DTYPES:  # bfloat16 and fp8 are floats
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

    # -- operands -----------------------------------------------------------------------------------------------

    def _operand(self, other: Any) -> Tensor:
        """``other`` as a Tensor: a Tensor must have this tensor's dtype; Python and NumPy scalars (and lists)
        take the dtype that :func:`~nbcoll.tensors.dtypes.scalar_result_dtype` gives them with this tensor."""
        if isinstance(other, Tensor):
            policy = active_autocast() if other.dtype != self.dtype else None
            wider = None if policy is None else policy.promote(self.dtype, other.dtype)
            if wider is not None:  # under autocast, as PyTorch's type promotion: float16 + float32 -> float32
                return other if other.dtype == wider else other.astype(wider)
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

    def _wrap(self, array: Any) -> Tensor:
        """A new Tensor (never a subclass such as Parameter) around ``array``, outside the graph."""
        return Tensor._from_array(array)


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


__all__ = ["Tensor", "tensor"]
