"""The autocast policy active on this thread: read where ops are dispatched, set by ``nbcoll.amp.autocast``.

The tensors layer only reads it, so it needs nothing from the layers above. ``Function.apply`` is the one place
that asks it to recast an op's arguments; ``Tensor._operand`` asks it which dtype two mixed floating operands
meet in (PyTorch's type promotion, which autocast's outputs need: a float16 product plus a float32 bias)::

    policy.route(function, args) -> (function, args)    the op to run and its arguments, recast
    policy.promote(dtype_a, dtype_b) -> dtype | None     None: mixed dtypes stay an error

Example::

    >>> from nbcoll.tensors.autocast_state import active_autocast
    >>> active_autocast() is None                        # outside ``with nbcoll.autocast():``
    True
"""

from __future__ import annotations

import threading
from typing import Any

_state = threading.local()  # per thread, as PyTorch's: loopback ranks each enter their own autocast


def active_autocast() -> Any:
    """The policy of the innermost active ``autocast`` on this thread, or None.

    >>> import nbcoll
    >>> from nbcoll.tensors.autocast_state import active_autocast
    >>> with nbcoll.autocast():
    ...     active_autocast().dtype
    dtype('float16')
    """
    return getattr(_state, "policy", None)


def set_active_autocast(policy: Any) -> Any:
    """Make ``policy`` (or None) the active one; returns the one it replaces, for the caller to restore.

    >>> from nbcoll.tensors.autocast_state import set_active_autocast
    >>> set_active_autocast(None) is None
    True
    """
    previous = active_autocast()
    _state.policy = policy
    return previous


__all__ = ["active_autocast", "set_active_autocast"]
