"""Walking a module's tree of registered children: its sub-modules, parameters and buffers, and switching modes.

:class:`ModuleTree` is the half of :class:`~nbcoll.nn.module.Module` that reads the ``_modules``,
``_parameters`` and ``_buffers`` dictionaries which registration fills: every walk is depth first, in
registration order, and yields an object shared by two names once.

Example::

    >>> from nbcoll import nn
    >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    >>> [name for name, _ in model.named_parameters()]
    ['0.weight', '0.bias', '2.weight', '2.bias']
    >>> model.eval().training, model[0].training
    (False, False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll.nn.parameter import write_values
from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.nn.module import Module
    from nbcoll.nn.parameter import Parameter


class ModuleTree:
    """The walks and mode switches of :class:`~nbcoll.nn.module.Module`, the only class that uses it.

    >>> from nbcoll import nn
    >>> len(list(nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1)).modules()))     # itself and its two layers
    3
    """

    _modules: dict[str, Any]
    _parameters: dict[str, Any]
    _buffers: dict[str, Any]
    training: bool

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
