"""``Dropout``: zero random elements while training, pass everything through in evaluation.

Example::

    drop = nbcoll.nn.Dropout(0.1)
    y = drop(x)                 # training: about 10% of x zeroed, the rest scaled by 1 / 0.9
    drop.eval()
    drop(x) is x                # True
"""

from __future__ import annotations

from nbcoll.nn.module import Module
from nbcoll.nn.shapes import check_input
from nbcoll.seed import next_seed
from nbcoll.tensors import Tensor
from nbcoll.tensors.ops import nn as nn_ops


class Dropout(Module):
    """``for i: y[i] = x[i] / (1 - p) if keep[i] else 0`` with ``P(keep[i]) = 1 - p``, while ``training``.

    Each call draws a new mask. Its seed comes from the generator that ``nbcoll.manual_seed`` restarts, and the
    counter-based kernel (``nbcoll.kernels.random``) turns a seed into the same mask on every backend.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> x = nbcoll.tensor(np.ones(8, np.float32))
        >>> nbcoll.manual_seed(0)
        >>> a = nn.Dropout(0.5)(x)
        >>> nbcoll.manual_seed(0)
        >>> b = nn.Dropout(0.5)(x)
        >>> a.numpy(), bool((a.numpy() == b.numpy()).all())     # kept ones doubled; the same seed, the same mask
        (array([0., 2., 0., 2., 2., 0., 2., 2.], dtype=float32), True)
        >>> nn.Dropout(0.5).eval()(x) is x
        True
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"p: the drop probability must be a number in [0, 1], got {p!r}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (...,))
        if not self.training or self.p == 0:
            return x
        return nn_ops.Dropout.apply(x, self.p, next_seed())

    def extra_repr(self) -> str:
        return f"p={self.p}"


__all__ = ["Dropout"]
