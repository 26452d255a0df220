"""``Module``: the base class of every layer and model. It finds its parameters by the attributes it is given.

Assigning a ``Parameter`` to an attribute registers it as a parameter, assigning a ``Module`` registers a child,
and ``register_buffer`` records state that is saved but not trained. Everything else (``parameters()``,
``state_dict()``, ``train()``, ``to(dtype)``) walks that tree of registered children.

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
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from nbcoll import memory
from nbcoll.nn.functional_call import functional_call
from nbcoll.nn.parameter import Parameter, copy_tensor, write_values
from nbcoll.tensors import RemovableHandle, Tensor, no_grad

ForwardPreHook = Callable[["Module", tuple], Any]
"""``hook(module, args)``: may return new positional arguments (a tuple, or one value) for forward."""
ForwardHook = Callable[["Module", tuple, Any], Any]
"""``hook(module, args, output)``: may return a value that replaces forward's output."""


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(strict=False)`` skipped: keys the module has and the dict lacks, and the reverse.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> layer = nn.Linear(2, 2)
    >>> layer.load_state_dict({"weight": layer.weight.numpy(), "scale": 1.0}, strict=False)
    IncompatibleKeys(missing_keys=['bias'], unexpected_keys=['scale'])
    """

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
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

    # -- walking the tree --------------------------------------------------------------------------------------

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct sub-modules with their attribute names, in registration order.

        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
        >>> [(name, type(child).__name__) for name, child in model.named_children()]
        [('0', 'Linear'), ('1', 'ReLU')]
        """
        seen: set[int] = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        """The direct sub-modules, in registration order.

        >>> from nbcoll import nn
        >>> [type(child).__name__ for child in nn.Sequential(nn.Linear(2, 3), nn.ReLU()).children()]
        ['Linear', 'ReLU']
        """
        for _, child in self.named_children():
            yield child

    def named_modules(self, prefix: str = "", _seen: set[int] | None = None) -> Iterator[tuple[str, Module]]:
        """This module and every descendant, depth first, each once, with its dotted path ("" for this one).

        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU()))
        >>> [name for name, _ in model.named_modules()]
        ['', '0', '1', '1.0']
        """
        seen = set() if _seen is None else _seen
        if id(self) in seen:
            return
        seen.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name, seen)

    def modules(self) -> Iterator[Module]:
        """This module and every descendant, depth first, each once.

        >>> from nbcoll import nn
        >>> [type(m).__name__ for m in nn.Sequential(nn.Linear(2, 3), nn.ReLU()).modules()]
        ['Sequential', 'Linear', 'ReLU']
        """
        for _, module in self.named_modules():
            yield module

    def _named_members(self, store: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()  # a Tensor shared by two layers (tied weights) is listed once
        modules = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for module_prefix, module in modules:
            for name, member in getattr(module, store).items():
                if member is not None and id(member) not in seen:
                    seen.add(id(member))
                    yield (f"{module_prefix}.{name}" if module_prefix else name), member

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Every parameter with its dotted name (``"0.weight"``), each shared one once.

        >>> from nbcoll import nn
        >>> [(name, p.shape) for name, p in nn.Sequential(nn.Linear(2, 3)).named_parameters()]
        [('0.weight', (3, 2)), ('0.bias', (3,))]
        """
        yield from self._named_members("_parameters", prefix, recurse)  # type: ignore[misc]

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter, each shared one once: what an optimizer is given.

        >>> from nbcoll import nn
        >>> sum(p.size for p in nn.Linear(4, 3).parameters())         # 4 * 3 weights + 3 biases
        15
        """
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """Every buffer with its dotted name, each shared one once.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Module())
        >>> model[0].register_buffer("count", nbcoll.tensor(0))
        >>> [name for name, _ in model.named_buffers()]
        ['0.count']
        """
        yield from self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer, each shared one once.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> layer = nn.Module()
        >>> layer.register_buffer("count", nbcoll.tensor(3))
        >>> [b.item() for b in layer.buffers()]
        [3]
        """
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn(module)`` on every descendant and then on this module (to initialise weights); returns self.

        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        >>> def init_weights(module):
        ...     if isinstance(module, nn.Linear):
        ...         nn.init.zeros_(module.weight)
        >>> model.apply(init_weights)[1].weight.numpy()
        array([[0., 0.],
               [0., 0.]], dtype=float32)
        """
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # -- modes and gradients -----------------------------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active) on this module and every descendant; returns self.

        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Dropout(0.5))
        >>> model.train().training, model[0].training
        (True, True)
        """
        if not isinstance(mode, bool):
            raise TypeError(f"mode: expected a bool, got {type(mode).__name__}")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode (dropout off): the same as ``train(False)``.

        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Dropout(0.5))
        >>> model.eval()[0].training
        False
        """
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter; returns self.

        >>> from nbcoll import nn
        >>> layer = nn.Linear(2, 2).requires_grad_(False)
        >>> [p.requires_grad for p in layer.parameters()]
        [False, False]
        """
        for param in self.parameters():
            param.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``grad = None``), or fill it with zeros where ``set_to_none=False``.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> layer = nn.Linear(2, 1)
        >>> layer(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
        >>> layer.zero_grad()
        >>> print(layer.weight.grad)
        None
        """
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                write_values(param.grad, np.zeros(param.shape, param.grad.dtype))

    # -- state -------------------------------------------------------------------------------------------------

    def _state_tensors(self, prefix: str = "") -> dict[str, Tensor]:
        """Parameters and persistent buffers by dotted name; a shared one appears under each of its names."""
        state: dict[str, Tensor] = {}
        for name, param in self._parameters.items():
            if param is not None:
                state[prefix + name] = param
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers:
                state[prefix + name] = buffer
        for name, child in self._modules.items():
            if child is not None:
                state.update(child._state_tensors(f"{prefix}{name}."))
        return state

    def state_dict(self, keep_vars: bool = False) -> dict[str, Any]:
        """Name -> host copy (``numpy.ndarray``) of every parameter and persistent buffer; with ``keep_vars=True``,
        name -> the Tensor itself.

        >>> from nbcoll import nn
        >>> state = nn.Linear(3, 2).state_dict()
        >>> {name: value.shape for name, value in state.items()}
        {'weight': (2, 3), 'bias': (2,)}
        """
        tensors = self._state_tensors()
        if keep_vars:
            return tensors
        return {name: tensor.numpy() for name, tensor in tensors.items()}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy ``state_dict``'s values into the existing parameters and buffers (converted to their dtypes).

        Nothing is copied unless every value fits: a wrong shape is always an error, and with ``strict=True`` so
        is a missing or an unexpected key; the error names each of them. Returns the missing and unexpected keys.

        >>> from nbcoll import nn
        >>> a, b = nn.Linear(3, 2), nn.Linear(3, 2)
        >>> b.load_state_dict(a.state_dict())
        IncompatibleKeys(missing_keys=[], unexpected_keys=[])
        >>> bool((a.weight.numpy() == b.weight.numpy()).all())
        True
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict: expected a dict of name -> array, got {type(state_dict).__name__}")
        targets = self._state_tensors()
        missing = [name for name in targets if name not in state_dict]
        unexpected = [name for name in state_dict if name not in targets]
        values, wrong_shapes = {}, []
        for name, target in targets.items():
            if name in state_dict:
                value = state_dict[name]
                values[name] = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
                if values[name].shape != target.shape:
                    wrong_shapes.append(f"{name!r} (expected {target.shape}, got {values[name].shape})")
        problems = []
        if strict and missing:
            problems.append("missing keys " + ", ".join(repr(k) for k in missing))
        if strict and unexpected:
            problems.append("unexpected keys " + ", ".join(repr(k) for k in unexpected))
        if wrong_shapes:
            problems.append("wrong shapes " + ", ".join(wrong_shapes))
        if problems:
            raise RuntimeError(f"load_state_dict: cannot load into {type(self).__name__}: " + "; ".join(problems))
        for name, value in values.items():
            write_values(targets[name], value)
        return IncompatibleKeys(missing, unexpected)

    def to(self, dtype: Any) -> Module:
        """Cast every floating parameter, gradient and buffer to ``dtype`` in place; returns self.

        The Parameter objects stay the same (an optimizer built before keeps working); their arrays are replaced.

        >>> import numpy as np
        >>> from nbcoll import nn
        >>> layer = nn.Linear(2, 2)
        >>> weight = layer.weight
        >>> layer.to(np.float64).weight.dtype, layer.weight is weight
        (dtype('float64'), True)
        """
        dtype = memory.check_dtype(dtype, "dtype")
        if dtype.kind != "f":
            raise TypeError(f"dtype: Module.to casts to a floating dtype (float16/32/64), got {dtype}")
        with no_grad():
            for tensor in [*self.parameters(), *self.buffers()]:
                if tensor.dtype.kind == "f" and tensor.dtype != dtype:
                    # The setter of .data refuses a new dtype, on purpose; a cast in place is the one exception.
                    tensor._data = tensor.detach().astype(dtype).data
                    if tensor.grad is not None:
                        tensor.grad = tensor.grad.detach().astype(dtype)
        return self

    def float(self) -> Module:
        """Cast every floating parameter, gradient and buffer to float32 in place; returns self.

        >>> from nbcoll import nn
        >>> nn.Linear(2, 2).double().float().weight.dtype
        dtype('float32')
        """
        return self.to(np.float32)

    def double(self) -> Module:
        """Cast every floating parameter, gradient and buffer to float64 in place; returns self.

        >>> from nbcoll import nn
        >>> nn.Linear(2, 2).double().weight.dtype
        dtype('float64')
        """
        return self.to(np.float64)

    def half(self) -> Module:
        """Cast every floating parameter, gradient and buffer to float16 in place; returns self.

        >>> from nbcoll import nn
        >>> nn.Linear(2, 2).half().bias.dtype
        dtype('float16')
        """
        return self.to(np.float16)

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
