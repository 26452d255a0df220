"""Elementwise activations as layers: ReLU, Tanh, Sigmoid and GELU. They hold no parameters.

Example::

    model = nbcoll.nn.Sequential(nbcoll.nn.Linear(4, 8), nbcoll.nn.ReLU(), nbcoll.nn.Linear(8, 1))
"""

from __future__ import annotations

from nbcoll.nn.module import Module
from nbcoll.nn.shapes import check_input
from nbcoll.tensors import Tensor


class ReLU(Module):
    """``for i: y[i] = max(x[i], 0)``; any shape.

    Example::

        ReLU()(nbcoll.tensor([-1.0, 2.0]))      # tensor([0., 2.])
    """

    def forward(self, x: Tensor) -> Tensor:
        return check_input(self, x, (...,)).relu()


class Tanh(Module):
    """``for i: y[i] = tanh(x[i])``; any shape.

    Example::

        Tanh()(nbcoll.tensor([0.0]))            # tensor([0.])
    """

    def forward(self, x: Tensor) -> Tensor:
        return check_input(self, x, (...,)).tanh()


class Sigmoid(Module):
    """``for i: y[i] = 1 / (1 + exp(-x[i]))``; any shape.

    Example::

        Sigmoid()(nbcoll.tensor([0.0]))         # tensor([0.5])
    """

    def forward(self, x: Tensor) -> Tensor:
        return check_input(self, x, (...,)).sigmoid()


class GELU(Module):
    """``for i: y[i] = 0.5 * x[i] * (1 + tanh(sqrt(2/pi) * (x[i] + 0.044715 * x[i]**3)))``; any shape.

    This is the tanh form, PyTorch's ``GELU(approximate="tanh")`` (GPT-2's); it differs from the exact form
    ``x * Phi(x)`` by less than 1e-3. Only ``approximate="tanh"`` is accepted, so that no one gets it unknowingly.

    Example::

        GELU()(nbcoll.tensor([1.0]))            # tensor([0.841192])
    """

    def __init__(self, approximate: str = "tanh") -> None:
        super().__init__()
        if approximate != "tanh":
            raise ValueError(f"approximate: only the tanh form of GELU is implemented, got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return check_input(self, x, (...,)).gelu()

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


__all__ = ["GELU", "ReLU", "Sigmoid", "Tanh"]
