"""Tensors on the current backend and the autograd engine that differentiates them.

Example::

    from nbcoll.tensors import tensor, no_grad
    w = tensor([[0.5], [-1.0]], requires_grad=True)
    loss = (tensor([[1.0, 2.0]]) @ w).sigmoid().sum()
    loss.backward()
    w.grad
"""

from nbcoll.tensors.dtypes import get_default_dtype, set_default_dtype
from nbcoll.tensors.engine import backward
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from nbcoll.tensors.hook_handle import RemovableHandle
from nbcoll.tensors.tensor import Tensor, tensor

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
