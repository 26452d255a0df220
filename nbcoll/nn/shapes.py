"""The input check every layer makes once, at the entry of forward: a shape pattern, and a clear error.

A pattern is a tuple of sizes: an int must match exactly, a string names a size that may be anything, and a
leading ``...`` stands for any number of leading dimensions. A list of patterns accepts any one of them.

Example::

    x = check_input(self, x, (..., self.in_features))
    # ValueError: Linear(in_features=3, out_features=2, bias=True): expected input of shape (*, 3), got (4, 5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.nn.module import Module

Pattern = tuple[Any, ...]


def _matches(shape: tuple[int, ...], pattern: Pattern) -> bool:
    if pattern and pattern[0] is Ellipsis:
        fixed = pattern[1:]
        if len(shape) < len(fixed):
            return False
        shape = shape[len(shape) - len(fixed) :]
        pattern = fixed
    if len(shape) != len(pattern):
        return False
    return all(not isinstance(want, int) or want == got for want, got in zip(pattern, shape, strict=True))


def format_pattern(pattern: Pattern) -> str:
    """``(..., 3)`` as ``(*, 3)``; named sizes appear by name: ``(batch, 3)``."""
    parts = ["*" if p is Ellipsis else str(p) for p in pattern]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def describe(layer: Module) -> str:
    """How an error names a layer: its class and settings, as the first line of its repr."""
    return f"{type(layer).__name__}({layer.extra_repr()})"


def check_input(
    layer: Module, x: Any, patterns: Pattern | list[Pattern], name: str = "input", dtype: Any = None
) -> Tensor:
    """``x`` as a Tensor, or ``ValueError`` naming the layer, the expected shape(s) and the actual shape.

    With ``dtype`` (the layer's parameters' dtype), an input of another dtype is a ``TypeError`` that says so.

    >>> import numpy as np, nbcoll
    >>> from nbcoll import nn
    >>> layer = nn.Linear(3, 2)
    >>> nn.check_input(layer, nbcoll.tensor(np.zeros((5, 3), np.float32)), (..., 3)).shape
    (5, 3)
    >>> nn.check_input(layer, nbcoll.tensor(np.zeros((5, 4), np.float32)), (..., 3))
    Traceback (most recent call last):
        ...
    ValueError: Linear(in_features=3, out_features=2, bias=True): expected input of shape (*, 3), got (5, 4)
    """
    if not isinstance(x, Tensor):
        if isinstance(x, np.ndarray):
            x = Tensor(x)
        else:
            raise TypeError(f"{describe(layer)}: expected {name} to be a Tensor, got {type(x).__name__}")
    choices = patterns if isinstance(patterns, list) else [patterns]
    if not any(_matches(x.shape, pattern) for pattern in choices):
        expected = " or ".join(format_pattern(p) for p in choices)
        raise ValueError(f"{describe(layer)}: expected {name} of shape {expected}, got {x.shape}")
    if dtype is not None and x.dtype != np.dtype(dtype):
        raise TypeError(
            f"{describe(layer)}: expected {name} of dtype {np.dtype(dtype)} (the parameters' dtype), got {x.dtype}; "
            "convert the input with astype() or the layer with to()"
        )
    return x


def positive_int(value: Any, arg: str) -> int:
    """``value`` as an int, or ``ValueError`` naming ``arg`` unless it is an int >= 1 (a size of a layer)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{arg}: expected an int >= 1, got {value!r}")
    return int(value)


__all__ = ["check_input", "describe", "format_pattern", "positive_int"]
