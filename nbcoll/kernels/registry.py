"""Every kernel in nbcoll, with representative signatures, so one test can compile them all to PTX.

Example::

    @register("void(float32[::1], float32[::1])")
    @cuda.jit
    def double_kernel(x, out):
        ...

:func:`all_kernels` imports every module under ``nbcoll`` first, so a kernel anywhere in the package is listed.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KernelEntry:
    """One registered kernel: its name, its Numba dispatcher and the signatures the PTX check compiles."""

    name: str
    dispatcher: Any
    signatures: list[str] = field(default_factory=list)

    @property
    def py_func(self) -> Callable:
        return self.dispatcher.py_func


_REGISTRY: dict[str, KernelEntry] = {}


def register(*signatures: str, name: str | None = None) -> Callable[[Any], Any]:
    """Decorator for a ``cuda.jit`` kernel: list it, with signatures for the PTX check, and return it unchanged."""
    if not signatures:
        raise ValueError("register(*signatures): give at least one representative signature")

    def decorate(dispatcher: Any) -> Any:
        func = dispatcher.py_func
        key = name or f"{func.__module__.removeprefix('nbcoll.')}.{func.__name__}"
        if key in _REGISTRY and _REGISTRY[key].dispatcher is not dispatcher:
            raise ValueError(f"register(name): kernel {key!r} is registered twice")
        _REGISTRY[key] = KernelEntry(key, dispatcher, list(signatures))
        return dispatcher

    return decorate


def import_all_modules() -> None:
    """Import every module of the nbcoll package, so that every kernel is defined and registered."""
    import nbcoll

    for info in pkgutil.walk_packages(nbcoll.__path__, prefix="nbcoll."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)


def all_kernels() -> list[KernelEntry]:
    """Every registered kernel of nbcoll, sorted by name."""
    import_all_modules()
    return [_REGISTRY[key] for key in sorted(_REGISTRY)]
