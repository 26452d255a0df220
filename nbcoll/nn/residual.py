"""``Residual``: ``y = block(x) + shortcut(x)``, the skip connection that lets deep networks train.

Example::

    from nbcoll import nn
    same = nn.Residual(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)))
    wider = nn.Residual(nn.Linear(8, 16), projection=nn.Linear(8, 16, bias=False))
"""

from __future__ import annotations

from typing import Any

from nbcoll.nn.module import Module
from nbcoll.nn.shapes import describe
from nbcoll.tensors import Tensor


class Residual(Module):
    """``y = block(x) + (x if projection is None else projection(x))``.

    The shortcut is the identity when the block keeps the shape, and a learned ``projection`` (often a Linear
    without bias) when it does not. The two branches must agree in shape; the error says which to add.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> x = nbcoll.tensor([[1.0, 2.0, 3.0, 4.0]])
        >>> nn.Residual(nn.Linear(4, 4))(x).shape == x.shape
        True
        >>> nn.Residual(nn.Linear(4, 2), projection=nn.Linear(4, 2, bias=False))(x).shape
        (1, 2)
    """

    def __init__(self, block: Module, projection: Module | None = None) -> None:
        super().__init__()
        if not isinstance(block, Module):
            raise TypeError(f"block: expected a Module, got {type(block).__name__}")
        if projection is not None and not isinstance(projection, Module):
            raise TypeError(f"projection: expected a Module or None, got {type(projection).__name__}")
        self.block = block
        if projection is None:
            self.register_module("projection", None)
        else:
            self.projection = projection

    def forward(self, x: Any) -> Tensor:
        out = self.block(x)
        shortcut = x if self.projection is None else self.projection(x)
        if out.shape != shortcut.shape:
            fix = "give Residual a projection" if self.projection is None else "fix the projection"
            raise ValueError(
                f"{describe(self)}: expected the block's output to have the shortcut's shape {shortcut.shape}, "
                f"got {out.shape}; {fix} that maps the input to {out.shape}"
            )
        return out + shortcut


__all__ = ["Residual"]
