"""Dropout on one rank's part of a tensor that draws exactly the mask one process would draw on the whole tensor.

Tensor- and sequence-parallel layers hold a block of a tensor (some heads, some positions). To equal one process,
each rank draws the full tensor's mask from the shared seed and keeps its own block of it: one full-size
temporary mask per dropout (Megatron instead draws each rank's part from a seed of its own, which is cheaper but
cannot equal one process). Every rank must draw the same seeds in the same order (``nbcoll.manual_seed`` on
every rank, then the same calls), as one process draws them.

Example::

    drop = SplitDropout(0.1, axis=1, part=comm.rank, parts=comm.size)   # this rank's heads of (N, H, L, L)
    y = drop(scores)
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.kernels import random
from nbcoll.nn import Module
from nbcoll.seed import next_seed
from nbcoll.tensors import Tensor
from nbcoll.tensors.function import Context, Function


class DropoutPart(Function):
    """``y = x * mask / (1 - p)`` with ``mask`` this rank's block along ``axis`` of the mask of ``full_shape``."""

    @staticmethod
    def forward(ctx: Context, x: Any, p: float, seed: int, full_shape: tuple, axis: int, part: int) -> Any:
        _, full_mask = random.dropout(memory.zeros(full_shape, x.dtype), p, seed)  # what one process draws
        width = x.shape[axis]
        index = (slice(None),) * axis + (slice(part * width, (part + 1) * width),)
        mask = copy_kernels.contiguous(full_mask[index])
        ctx.p = p
        ctx.save_for_backward(mask)
        return random.dropout_backward(x, mask, p)  # the same product as the forward of a dropout

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        (mask,) = ctx.saved_tensors
        return random.dropout_backward(dy, mask, ctx.p), None, None, None, None, None


class SplitDropout(Module):
    """Dropout whose input is block ``part`` along ``axis`` of a tensor ``parts`` times wider there.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel.split_dropout import SplitDropout
    >>> nbcoll.manual_seed(0)
    >>> full = nbcoll.nn.Dropout(0.5)(nbcoll.tensor(np.ones((2, 4), np.float32))).numpy()
    >>> nbcoll.manual_seed(0)
    >>> right = SplitDropout(0.5, axis=1, part=1, parts=2)(nbcoll.tensor(np.ones((2, 2), np.float32))).numpy()
    >>> bool((right == full[:, 2:]).all())          # the right half of the mask one process draws
    True
    """

    def __init__(self, p: float, axis: int, part: int, parts: int) -> None:
        super().__init__()
        self.p, self.axis, self.part, self.parts = p, axis, part, parts

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        full = tuple(x.shape[: self.axis]) + (x.shape[self.axis] * self.parts,) + tuple(x.shape[self.axis + 1 :])
        return DropoutPart.apply(x, self.p, next_seed(), full, self.axis, self.part)


__all__ = ["DropoutPart", "SplitDropout"]
