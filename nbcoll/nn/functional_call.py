"""``functional_call``: run a module with some of its parameters or buffers replaced, for one call.

A gradient check perturbs float64 copies of a layer's parameters; a parallel strategy may run a layer on shards of
them. Both want the layer's forward with other tensors in place of its own, without touching the layer.

Example::

    from nbcoll.nn import functional_call
    y = functional_call(linear, {"weight": w2}, x)      # linear's forward with weight w2; linear is unchanged
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.nn.module import Module


def functional_call(module: Module, tensors: dict[str, Tensor], *args: Any, **kwargs: Any) -> Any:
    """Call ``module(*args, **kwargs)`` with some parameters or buffers replaced by ``tensors`` (dotted names).

    The replacements may be any Tensors (a gradient check passes float64 copies it perturbs); the module's own
    members are back in place when the call returns or raises.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> linear = nn.Linear(2, 1, bias=False)
        >>> w2 = nbcoll.tensor([[1.0, 10.0]])
        >>> nn.functional_call(linear, {"weight": w2}, nbcoll.tensor([[1.0, 1.0]])).numpy()   # forward with weight w2
        array([[11.]], dtype=float32)
        >>> linear.weight is not w2                                                         # the layer's own is back
        True
    """
    swapped: list[tuple[dict[str, Any], str, Any]] = []
    try:
        for dotted, tensor in tensors.items():
            owner_path, _, name = dotted.rpartition(".")
            owner = module.get_submodule(owner_path)
            store = owner._parameters if name in owner._parameters else owner._buffers
            if name not in store:
                raise KeyError(f"tensors: {type(owner).__name__} has no parameter or buffer {name!r} (in {dotted!r})")
            swapped.append((store, name, store[name]))
            store[name] = tensor
        return module(*args, **kwargs)
    finally:
        for store, name, original in reversed(swapped):
            store[name] = original


__all__ = ["functional_call"]
