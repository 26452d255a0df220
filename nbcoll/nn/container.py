"""Containers: ``Sequential`` chains modules; ``ModuleList`` and ``ModuleDict`` hold them for your own forward.

Example::

    from nbcoll import nn
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from nbcoll.nn.module import Module


def _module(value: Any, arg: str) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"{arg}: expected a Module, got {type(value).__name__}")
    return value


class Sequential(Module):
    """``forward(x) = m_n(...m_2(m_1(x)))``; children are named "0", "1", ... or by the keys of one dict.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        >>> model(nbcoll.tensor([[1.0, 2.0, 3.0]])).shape
        (1, 1)
        >>> model[0], len(model[1:])
        (Linear(in_features=3, out_features=4, bias=True), 2)
        >>> named = nn.Sequential({"hidden": nn.Linear(3, 4), "act": nn.Tanh()})
        >>> named.hidden
        Linear(in_features=3, out_features=4, bias=True)
    """

    def __init__(self, *modules: Module | dict[str, Module]) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], dict):
            for name, module in modules[0].items():
                self.add_module(name, _module(module, f"modules[{name!r}]"))
        else:
            for index, module in enumerate(modules):
                self.add_module(str(index), _module(module, f"modules[{index}]"))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: int | slice) -> Any:
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(dict(items[index]))
        if not -len(items) <= index < len(items):
            raise IndexError(f"index: {index} is out of range for a Sequential of {len(items)} modules")
        return items[index][1]

    def append(self, module: Module) -> Sequential:
        """Add ``module`` at the end (named by its position); returns self.

        >>> from nbcoll import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> len(model.append(nn.ReLU()))
        2
        """
        self.add_module(str(len(self)), _module(module, "module"))
        return self

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            x = module(x)
        return x


class ModuleList(Module):
    """A list of modules whose parameters the parent sees; iterate it in your own ``forward``.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> class Deep(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        ...
        ...     def forward(self, x):
        ...         for layer in self.layers:
        ...             x = layer(x).relu()
        ...         return x
        >>> model = Deep()
        >>> len(list(model.parameters())), model(nbcoll.tensor([[0.5] * 8])).shape
        (8, (1, 8))
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _renumber(self, modules: list[Module]) -> None:
        self._modules.clear()
        for index, module in enumerate(modules):
            self._modules[str(index)] = module

    def _index(self, index: int) -> int:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index: {index} is out of range for a ModuleList of {len(self)} modules")
        return index % len(self)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return self._modules[str(self._index(index))]

    def __setitem__(self, index: int, module: Module) -> None:
        self._modules[str(self._index(index))] = _module(module, "module")

    def __delitem__(self, index: int | slice) -> None:
        modules = list(self._modules.values())
        del modules[index if isinstance(index, slice) else self._index(index)]
        self._renumber(modules)

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end; returns self.

        >>> from nbcoll import nn
        >>> layers = nn.ModuleList([nn.Linear(2, 2)])
        >>> len(layers.append(nn.Linear(2, 2)))
        2
        """
        self._modules[str(len(self))] = _module(module, "module")
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add every module of ``modules`` at the end; returns self.

        >>> from nbcoll import nn
        >>> len(nn.ModuleList().extend([nn.ReLU(), nn.Tanh()]))
        2
        """
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Put ``module`` before position ``index``; the names are renumbered.

        >>> from nbcoll import nn
        >>> layers = nn.ModuleList([nn.ReLU(), nn.Tanh()])
        >>> layers.insert(1, nn.Sigmoid())
        >>> [type(layer).__name__ for layer in layers]
        ['ReLU', 'Sigmoid', 'Tanh']
        """
        modules = list(self._modules.values())
        modules.insert(index, _module(module, "module"))
        self._renumber(modules)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList has no forward: iterate over it in the forward of its parent")


class ModuleDict(Module):
    """A dict of modules whose parameters the parent sees, in insertion order (heads of a multi-task model).

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> heads = nn.ModuleDict({"digit": nn.Linear(4, 10), "parity": nn.Linear(4, 2)})
        >>> features = nbcoll.tensor([[1.0, 2.0, 3.0, 4.0]])
        >>> {name: head(features).shape for name, head in heads.items()}
        {'digit': (1, 10), 'parity': (1, 2)}
    """

    def __init__(self, modules: dict[str, Module] | None = None) -> None:
        super().__init__()
        for name, module in (modules or {}).items():
            self[name] = module

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, name: str) -> bool:
        return name in self._modules

    def __getitem__(self, name: str) -> Module:
        if name not in self._modules:
            raise KeyError(f"name: no module {name!r} in this ModuleDict (it has {list(self._modules)})")
        return self._modules[name]

    def __setitem__(self, name: str, module: Module) -> None:
        self.add_module(name, _module(module, f"modules[{name!r}]"))

    def __delitem__(self, name: str) -> None:
        del self._modules[name]

    def keys(self) -> Iterable[str]:
        """The names, in insertion order.

        >>> from nbcoll import nn
        >>> list(nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()}).keys())
        ['a', 'b']
        """
        return self._modules.keys()

    def values(self) -> Iterable[Module]:
        """The modules, in insertion order.

        >>> from nbcoll import nn
        >>> list(nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()}).values())
        [ReLU(), Tanh()]
        """
        return self._modules.values()

    def items(self) -> Iterable[tuple[str, Module]]:
        """``(name, module)`` pairs, in insertion order.

        >>> from nbcoll import nn
        >>> list(nn.ModuleDict({"a": nn.ReLU()}).items())
        [('a', ReLU())]
        """
        return self._modules.items()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward: pick its modules in the forward of its parent")


__all__ = ["ModuleDict", "ModuleList", "Sequential"]
