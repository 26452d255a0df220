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
    """One registered kernel: its name, its Numba dispatcher and the signatures the PTX check compiles.

    >>> from nbcoll.kernels import all_kernels
    >>> entry = next(e for e in all_kernels() if e.name == "kernels.combine.combine_max")
    >>> entry.name, entry.signatures[0]
    ('kernels.combine.combine_max', 'void(float32[::1], float32[::1], float32[::1])')
    """

    name: str
    dispatcher: Any
    signatures: list[str] = field(default_factory=list)

    @property
    def py_func(self) -> Callable:
        """The kernel's Python function, which ``numba.cuda.compile_ptx`` compiles for a GPU.

        >>> from nbcoll.kernels import all_kernels
        >>> next(e for e in all_kernels() if e.name == "kernels.combine.combine_max").py_func.__name__
        'combine_max'
        """
        return self.dispatcher.py_func


_REGISTRY: dict[str, KernelEntry] = {}


def register(*signatures: str, name: str | None = None) -> Callable[[Any], Any]:
    """Decorator for a ``cuda.jit`` kernel: list it, with signatures for the PTX check, and return it unchanged.

    Put it above ``@cuda.jit``, as every kernel module of nbcoll does::

        @register("void(float32[::1], float32[::1])")
        @cuda.jit
        def double_kernel(x, out):      # one thread: out[i] = 2 * x[i]
            ...

    >>> from nbcoll.kernels import all_kernels, register
    >>> [e.name for e in all_kernels() if e.name.startswith("kernels.copy.")][:2]
    ['kernels.copy.copy_kernel', 'kernels.copy.strided_copy_kernel']
    >>> register()
    Traceback (most recent call last):
        ...
    ValueError: register(*signatures): give at least one representative signature
    """

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
    """Every registered kernel of nbcoll, sorted by name.

    >>> from nbcoll.kernels import all_kernels
    >>> kernels = all_kernels()                # imports every module of nbcoll first
    >>> len(kernels) > 50, [e.name for e in kernels] == sorted(e.name for e in kernels)
    (True, True)
    """
    import_all_modules()
    return [_REGISTRY[key] for key in sorted(_REGISTRY)]
