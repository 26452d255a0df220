"""Tensors on the current backend and the autograd engine that differentiates them.

Example::

    from nbcoll.tensors import tensor, no_grad
    w = tensor([[0.5], [-1.0]], requires_grad=True)
    loss = (tensor([[1.0, 2.0]]) @ w).sigmoid().sum()
    loss.backward()
    w.grad

How the Tensor is put together. Imports go one way, from the core up to the operations, never back:

1. :mod:`~nbcoll.tensors.tensor` defines the core of :class:`Tensor`: its data, gradient, hooks and the
   conversion of operands to one dtype. It imports no operation.
2. :mod:`~nbcoll.tensors.function` defines ``Function`` and ``Context``; ``Function.apply`` builds the output
   Tensor, so it imports the core.
3. Each module of :mod:`nbcoll.tensors.ops` holds one family of operations: its Functions (forward and backward
   side by side, calling the kernel launch functions of the ``nbcoll.kernels`` module its docstring names), then
   the functions that apply them, which are both the Tensor methods and the ``F.*`` forms of
   :mod:`nbcoll.functional`. At its end the module adds its methods to the class: ``Tensor.exp = exp``.
   :mod:`~nbcoll.tensors.engine` adds ``backward`` the same way, and :mod:`nbcoll.interop` ``__dlpack__``.
4. This package imports all of them (below), so any import of a Tensor gives one with every method. To follow a
   method to its code, ``Tensor.exp.__module__`` names the module that holds it and its Function.

To add an operation: write its ``Function`` in the module of its family (or a new module of ``ops/`` for a new
family, imported below), the function that applies it right below, ``Tensor.name = name`` at the module's end if
it is a method, and import it into :mod:`nbcoll.functional` if it is an ``F.*`` form.
"""

from nbcoll.tensors.dtypes import get_default_dtype, set_default_dtype
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from nbcoll.tensors.hook_handle import RemovableHandle
from nbcoll.tensors.tensor import Tensor, tensor

# The modules that add methods to Tensor, by family: nothing else does.
from nbcoll.tensors.engine import backward  # isort: skip
from nbcoll.tensors.ops import arithmetic, cast, elementwise, getitem, indexing, join  # isort: skip  # noqa: F401
from nbcoll.tensors.ops import matmul, reduce, select, shape, softmax  # isort: skip  # noqa: F401
from nbcoll import interop  # isort: skip  # noqa: F401

__all__ = [
    "Context",
    "Function",
    "RemovableHandle",
    "Tensor",
    "backward",
    "enable_grad",
    "get_default_dtype",
    "is_grad_enabled",
    "no_grad",
    "set_default_dtype",
    "set_grad_enabled",
    "tensor",
]
