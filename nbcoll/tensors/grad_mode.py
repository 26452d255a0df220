"""Switch graph recording off: ``no_grad`` as a context manager or a decorator.

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
    >>> with nbcoll.no_grad():
    ...     y = x * 2               # no graph is recorded
    >>> y.requires_grad
    False
    >>> @nbcoll.no_grad()
    ... def evaluate(x):
    ...     return x * 2
    >>> evaluate(x).requires_grad, (x * 2).requires_grad
    (False, True)
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_state = threading.local()


def is_grad_enabled() -> bool:
    """True when operations record a graph for backward (the default).

    >>> import nbcoll
    >>> from nbcoll.autograd import is_grad_enabled
    >>> with nbcoll.no_grad():
    ...     inside = is_grad_enabled()
    >>> is_grad_enabled(), inside
    (True, False)
    """
    return getattr(_state, "enabled", True)


def set_grad_enabled(enabled: bool) -> None:
    """Turn graph recording on or off for this thread until it is set again (``no_grad`` restores it for you).

    >>> import nbcoll
    >>> from nbcoll.tensors import set_grad_enabled
    >>> x = nbcoll.tensor([1.0], requires_grad=True)
    >>> set_grad_enabled(False)
    >>> (x * 2).requires_grad
    False
    >>> set_grad_enabled(True)
    >>> (x * 2).requires_grad
    True
    """
    _state.enabled = bool(enabled)


class _GradMode:
    """Set graph recording to ``enabled`` inside a ``with`` block or a decorated function, then restore it."""

    enabled = True

    def __init__(self) -> None:
        self._previous: list[bool] = []  # a stack, so that one object can be entered again while active

    def __enter__(self) -> None:
        self._previous.append(is_grad_enabled())
        set_grad_enabled(self.enabled)

    def __exit__(self, *exc_info: Any) -> None:
        set_grad_enabled(self._previous.pop())

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with type(self)():
                return func(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):  # noqa: N801 - lower case, as in PyTorch, because it reads as a statement
    """Run a block, or every call of a function, without recording a graph.

    Example::

        >>> import nbcoll
        >>> w = nbcoll.tensor([1.0], requires_grad=True)
        >>> (w * 3).sum().backward()
        >>> with nbcoll.no_grad():
        ...     w_new = w - 0.1 * w.grad     # a plain update: no graph, no grad
        >>> w_new.requires_grad, w_new.numpy()
        (False, array([0.7], dtype=float32))
        >>> @nbcoll.no_grad()
        ... def evaluate(x):
        ...     return x * w
        >>> evaluate(nbcoll.tensor([2.0])).requires_grad
        False
    """

    enabled = False


class enable_grad(_GradMode):  # noqa: N801
    """Record a graph again inside a ``no_grad`` block.

    Example::

        >>> import nbcoll
        >>> from nbcoll.autograd import enable_grad
        >>> x = nbcoll.tensor([1.0], requires_grad=True)
        >>> with nbcoll.no_grad():
        ...     with enable_grad():
        ...         y = x * 2                # recorded
        >>> y.requires_grad
        True
    """

    enabled = True
