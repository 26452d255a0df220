"""Elementwise activations as layers: ReLU, Tanh, Sigmoid and GELU. They hold no parameters.

Example::

    model = nbcoll.nn.Sequential(nbcoll.nn.Linear(4, 8), nbcoll.nn.ReLU(), nbcoll.nn.Linear(8, 1))
"""

from __future__ import annotations

import math

from nbcoll.nn.module import Module
from nbcoll.nn.shapes import check_input
from nbcoll.tensors import Tensor
from nbcoll.tensors.ops.special import Erf

SQRT_HALF = math.sqrt(0.5)


class ReLU(Module):
    """``for i: y[i] = max(x[i], 0)``; any shape.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> nn.ReLU()(nbcoll.tensor([-1.0, 2.0])).numpy()
        array([0., 2.], dtype=float32)
    """

    def forward(self, x: Tensor) -> Tensor:
        return check_input(self, x, (...,)).relu()


class Tanh(Module):
    """``for i: y[i] = tanh(x[i])``; any shape.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> nn.Tanh()(nbcoll.tensor([0.0])).numpy()
        array([0.], dtype=float32)
    """

    def forward(self, x: Tensor) -> Tensor:
        return check_input(self, x, (...,)).tanh()


class Sigmoid(Module):
    """``for i: y[i] = 1 / (1 + exp(-x[i]))``; any shape.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> nn.Sigmoid()(nbcoll.tensor([0.0])).numpy()
        array([0.5], dtype=float32)
    """

    def forward(self, x: Tensor) -> Tensor:
        return check_input(self, x, (...,)).sigmoid()


class GELU(Module):
    """``for i: y[i] = x[i] * Phi(x[i]) = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2)))``; any shape.

    ``approximate="tanh"`` uses ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`` instead (GPT-2's
    form), which differs from the exact one by less than 1e-3. Both are compositions of Tensor operations, so
    their gradients come from the operations' own backward functions.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> nn.GELU()(nbcoll.tensor([1.0])).numpy()
        array([0.8413447], dtype=float32)
        >>> nn.GELU(approximate="tanh")(nbcoll.tensor([1.0])).numpy()
        array([0.841192], dtype=float32)
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate: expected 'none' (the exact GELU) or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (...,))
        if self.approximate == "tanh":
            return x.gelu()
        return 0.5 * x * (Erf.apply(x * SQRT_HALF) + 1.0)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


__all__ = ["GELU", "ReLU", "Sigmoid", "Tanh"]
