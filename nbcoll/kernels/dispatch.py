"""The one place where a launch function chooses between its kernels and its NumPy reference.

Every kernel file has the same three parts side by side: the NumPy reference, the kernel(s), and the launch
code. A public function checks its arguments once and calls the launch code, which :func:`dispatch` wraps::

    def scale_reference(x, factor):             # NumPy: the meaning
        return x * factor

    @cuda.jit
    def scale_kernel(x, factor, out):           # one thread scales one element
        ...

    @dispatch(reference=scale_reference)
    def _scale(x, factor):                      # the launch: runs on cuda and sim
        out = memory.empty(x.shape, x.dtype)
        launch_1d(scale_kernel, x.size, flat(x), factor, flat(out))
        return out

    def scale(x, factor):                       # the public entry: checks, then dispatches
        x = memory.as_device_array(x, "x")
        return _scale(x, factor)

On the ``numpy`` backend ``_scale(x, factor)`` returns ``scale_reference(x, factor)``; on ``cuda`` and ``sim`` it
runs its own body. The reference takes the launch's arguments and returns what the launch returns; where a
public reference has another shape (it returns a new array where the launch fills ``out``), a two-line adapter
beside the launch says so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from nbcoll import backend

Launch = TypeVar("Launch", bound=Callable[..., Any])


def dispatch(reference: Callable[..., Any]) -> Callable[[Launch], Launch]:
    """Decorator for launch code: ``launch(*args)`` on ``cuda``/``sim``, ``reference(*args)`` on ``numpy``.

    The decorated function keeps both halves as attributes, ``.launch`` and ``.reference``, so a test or a
    reader can call either one directly.
    """

    def decorate(launch: Launch) -> Launch:
        @functools.wraps(launch)
        def run(*args: Any, **kwargs: Any) -> Any:
            if backend.get_backend() == "numpy":
                return reference(*args, **kwargs)
            return launch(*args, **kwargs)

        run.launch = launch  # type: ignore[attr-defined]
        run.reference = reference  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return decorate


def resolve(function: Callable[..., Any]) -> Callable[..., Any]:
    """The half of a :func:`dispatch`-ed ``function`` that the current backend runs: ``.launch``, or
    ``.reference`` on ``numpy``.

    For a step that runs the same launch again and again (the LL steps of a replayed collective): it chooses
    once, when the step is built, instead of on every call. A replay runs only on the backend it was planned on.
    """
    return function.reference if backend.get_backend() == "numpy" else function.launch


def fill_out(reference: Callable[..., Any]) -> Callable[..., Any]:
    """A reference that returns a new array, adapted to launch code whose last argument is ``out``.

    ``fill_out(unary_reference)(op, x, out)`` does ``out[...] = unary_reference(op, x)`` and returns ``out``.
    """

    def reference_into_out(*args: Any) -> Any:
        *inputs, out = args
        out[...] = reference(*inputs)
        return out

    return reference_into_out
