"""``LayerNorm``: normalise over the last dimensions to mean 0 and variance 1, then scale and shift.

Example::

    norm = nbcoll.nn.LayerNorm(8)
    y = norm(x)                 # x of shape (*, 8): each row of 8 normalised on its own
"""

from __future__ import annotations

from typing import Any

import numpy as np

import nbcoll.functional as F
from nbcoll.nn.linear import parameter_dtype
from nbcoll.nn.module import Module
from nbcoll.nn.parameter import Parameter
from nbcoll.nn.shapes import check_input, positive_int
from nbcoll.tensors import Tensor


class LayerNorm(Module):
    """``y = (x - mean) / sqrt(var + eps) * weight + bias``, statistics over the trailing ``normalized_shape``.

    The variance is the biased one (divided by the count, not count - 1), as in PyTorch. ``weight`` starts at
    ones and ``bias`` at zeros, both of shape ``normalized_shape``; ``elementwise_affine=False`` leaves both out,
    ``bias=False`` only the bias. One fused kernel does the work (``nbcoll.kernels.norm``).

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> norm = nn.LayerNorm(4)
        >>> y = norm(nbcoll.tensor([[1.0, 2.0, 3.0, 4.0]]))
        >>> round(float(y.numpy().mean()), 6), round(float(y.numpy().std()), 3)
        (0.0, 1.0)
        >>> nn.LayerNorm((4, 5))(nbcoll.tensor(np.ones((2, 4, 5), np.float32))).shape   # every 4 x 5 block on its own
        (2, 4, 5)
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
        if not shape:
            raise ValueError("normalized_shape: expected at least one dimension, got ()")
        self.normalized_shape = tuple(positive_int(n, "normalized_shape") for n in shape)
        if not eps >= 0:
            raise ValueError(f"eps: must be >= 0, got {eps!r}")
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        dtype = parameter_dtype(dtype)
        weight = Parameter(np.ones(self.normalized_shape, dtype)) if elementwise_affine else None
        self.register_parameter("weight", weight)
        self.register_parameter(
            "bias", Parameter(np.zeros(self.normalized_shape, dtype)) if elementwise_affine and bias else None
        )

    def forward(self, x: Tensor) -> Tensor:
        dtype = None if self.weight is None else self.weight.dtype
        x = check_input(self, x, (..., *self.normalized_shape), dtype=dtype)
        if len(self.normalized_shape) == 1:
            return F.layer_norm(x, self.weight, self.bias, self.eps)
        # The kernel normalises the last axis: flatten the normalised dimensions into one, then restore them.
        size = int(np.prod(self.normalized_shape))
        rows = x.reshape(*x.shape[: x.ndim - len(self.normalized_shape)], size)
        weight = None if self.weight is None else self.weight.reshape(size)
        bias = None if self.bias is None else self.bias.reshape(size)
        return F.layer_norm(rows, weight, bias, self.eps).reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


__all__ = ["LayerNorm"]
