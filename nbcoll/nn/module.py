"""``Module``: the base class of every layer and model. It finds its parameters by the attributes it is given.

Assigning a ``Parameter`` to an attribute registers it as a parameter, assigning a ``Module`` registers a child,
and ``register_buffer`` records state that is saved but not trained. Everything else (``parameters()``,
``state_dict()``, ``train()``, ``to(dtype)``) walks that tree of registered children: the walks are written in
:mod:`nbcoll.nn.module_tree`, saving, loading and casting in :mod:`nbcoll.nn.module_state`.

Example::

    import nbcoll
    from nbcoll import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(4, 8)
            self.out = nn.Linear(8, 2)

        def forward(self, x):
            return self.out(self.hidden(x).relu())

    model = MLP()
    [name for name, _ in model.named_parameters()]   # ['hidden.weight', 'hidden.bias', 'out.weight', 'out.bias']
    model.load_state_dict(model.state_dict())         # a round trip through NumPy arrays
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from nbcoll.nn.functional_call import functional_call
from nbcoll.nn.module_state import IncompatibleKeys, ModuleState
from nbcoll.nn.module_tree import ModuleTree
from nbcoll.nn.parameter import Parameter, copy_tensor
from nbcoll.tensors import RemovableHandle, Tensor

ForwardPreHook = Callable[["Module", tuple], Any]
"""``hook(module, args)``: may return new positional arguments (a tuple, or one value) for forward."""
ForwardHook = Callable[["Module", tuple, Any], Any]
"""``hook(module, args, output)``: may return a value that replaces forward's output."""


class Module(ModuleTree, ModuleState):
    """Base class of layers: subclasses assign parameters and sub-modules in ``__init__`` and define ``forward``.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> class Affine(nn.Module):
        ...     def __init__(self, n):
        ...         super().__init__()
        ...         self.scale = nn.Parameter(np.full(n, 2.0, np.float32))
        ...         self.register_buffer("calls", nbcoll.tensor(0))      # saved in state_dict, not trained
        ...
        ...     def forward(self, x):
        ...         return x * self.scale
        >>> layer = Affine(3)
        >>> layer(nbcoll.tensor([1.0, 2.0, 3.0])).numpy()   # pre-hooks, forward, then hooks
        array([2., 4., 6.], dtype=float32)
        >>> sorted(layer.state_dict())
        ['calls', 'scale']
    """

    training: bool

    def __init__(self) -> None:
        # object.__setattr__, because this class's __setattr__ needs these dictionaries to exist already.
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_forward_pre_hooks", [])
        object.__setattr__(self, "_forward_hooks", [])

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """What a call of the module computes; every subclass defines it, and ``module(x)`` calls it between the hooks.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> class Double(nn.Module):
        ...     def forward(self, x):
        ...         return x * 2
        >>> Double()(nbcoll.tensor([1.0, 2.0])).numpy()
        array([2., 4.], dtype=float32)
        """
        raise NotImplementedError(f"{type(self).__name__}.forward: a Module subclass must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for hook in list(self._forward_pre_hooks):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks):
            result = hook(self, args, output)
            if result is not None:
                output = result
        return output

    # -- registration ------------------------------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() has run: "
                f"call super().__init__() first in {type(self).__name__}.__init__"
            )
        if isinstance(value, Parameter):
            self._forget(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._forget(name)
            self._modules[name] = value
        elif name in self._parameters:
            if value is not None:
                raise TypeError(f"{name}: a parameter can only be replaced by a Parameter or None, got {type(value)}")
            self._parameters[name] = None
        elif name in self._modules:
            if value is not None:
                raise TypeError(f"{name}: a sub-module can only be replaced by a Module or None, got {type(value)}")
            self._modules[name] = None
        elif name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{name}: a buffer can only be replaced by a Tensor or None, got {type(value)}")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Called only when ordinary lookup fails: registered members live in the three dictionaries.
        members = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in members and name in members[store]:
                return members[store][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters or name in self._buffers or name in self._modules:
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def _forget(self, name: str) -> None:
        """Remove ``name`` from every place a member can be registered, before it is registered again."""
        self.__dict__.pop(name, None)
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        self._non_persistent_buffers.discard(name)
        self._modules.pop(name, None)

    def _check_new_name(self, name: str, kind: str) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"name: a {kind} name must be a non-empty string without '.', got {name!r}")
        if name in self.__dict__ or (hasattr(type(self), name) and name not in self._buffers):
            raise KeyError(f"name: {type(self).__name__} already has an attribute {name!r}")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or None: a parameter slot left empty, such as a layer without bias) as ``name``.

        >>> import numpy as np
        >>> from nbcoll import nn
        >>> layer = nn.Module()
        >>> layer.register_parameter("bias", None)                      # an empty slot: no bias
        >>> layer.register_parameter("weight", nn.Parameter(np.ones(2)))
        >>> [name for name, _ in layer.named_parameters()]
        ['weight']
        """
        self._check_new_name(name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"param: expected a Parameter or None, got {type(param).__name__}")
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register non-trained state (running statistics, a mask); ``persistent=False`` keeps it out of state_dict.

        ``to(dtype)`` casts floating buffers along with the parameters.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> layer = nn.Module()
        >>> layer.register_buffer("steps", nbcoll.tensor(0))
        >>> layer.register_buffer("mask", nbcoll.tensor([True, False]), persistent=False)
        >>> list(layer.state_dict()), len(list(layer.buffers()))
        (['steps'], 2)
        """
        self._check_new_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"tensor: expected a Tensor or None, got {type(tensor).__name__}")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` as the child ``name`` (what ``self.name = module`` does, for computed names).

        >>> from nbcoll import nn
        >>> model = nn.Module()
        >>> for i in range(2):
        ...     model.add_module(f"layer{i}", nn.Linear(2, 2))
        >>> [name for name, _ in model.named_children()]
        ['layer0', 'layer1']
        """
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"name: a module name must be a non-empty string without '.', got {name!r}")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"module: expected a Module or None, got {type(module).__name__}")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The module at the dotted path ``target`` ("" is this module): ``model.get_submodule("encoder.0")``.

        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
        >>> model.get_submodule("1.1")
        Linear(in_features=3, out_features=1, bias=True)
        """
        module: Module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"target: {type(module).__name__} has no sub-module {part!r} (in {target!r})")
            module = child
        return module

    # -- hooks -------------------------------------------------------------------------------------------------

    def register_forward_pre_hook(self, hook: ForwardPreHook) -> RemovableHandle:
        """Call ``hook(module, args)`` before each forward; a returned value replaces the positional arguments.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> layer = nn.Identity()
        >>> handle = layer.register_forward_pre_hook(lambda module, args: args[0] * 10)
        >>> layer(nbcoll.tensor([1.0])).numpy()
        array([10.], dtype=float32)
        """
        if not callable(hook):
            raise TypeError(f"hook: expected a callable, got {type(hook).__name__}")
        self._forward_pre_hooks.append(hook)
        return RemovableHandle(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: ForwardHook) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after each forward; a returned value replaces the output.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> layer = nn.Linear(3, 2)
        >>> handle = layer.register_forward_hook(lambda module, args, out: print("output shape", out.shape))
        >>> y = layer(nbcoll.tensor([[1.0, 2.0, 3.0]]))
        output shape (1, 2)
        >>> handle.remove()
        """
        if not callable(hook):
            raise TypeError(f"hook: expected a callable, got {type(hook).__name__}")
        self._forward_hooks.append(hook)
        return RemovableHandle(self._forward_hooks, hook)

    # -- copying -----------------------------------------------------------------------------------------------

    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        """``copy.deepcopy(model)``: an independent model; parameters and buffers are copied through the host.

        Shared parameters and sub-modules stay shared in the copy (``memo`` maps each original to its copy).
        """
        for module in self.modules():
            for member in [*module._parameters.values(), *module._buffers.values()]:
                if member is not None and id(member) not in memo:
                    memo[id(member)] = copy_tensor(member)
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        for name, value in self.__dict__.items():
            object.__setattr__(copied, name, copy.deepcopy(value, memo))
        return copied

    # -- printing ----------------------------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """The settings shown between the parentheses of ``repr``; layers override it.

        >>> from nbcoll import nn
        >>> nn.Linear(3, 2).extra_repr()
        'in_features=3, out_features=2, bias=True'
        """
        return ""

    def __repr__(self) -> str:
        lines = [self.extra_repr()] if self.extra_repr() else []
        for name, child in self._modules.items():
            child_text = repr(child).replace("\n", "\n  ")
            lines.append(f"({name}): {child_text}")
        if not self._modules:
            return f"{type(self).__name__}({''.join(lines)})"
        body = "".join(f"\n  {line}" for line in lines)
        return f"{type(self).__name__}({body}\n)"


__all__ = ["ForwardHook", "ForwardPreHook", "IncompatibleKeys", "Module", "functional_call"]
