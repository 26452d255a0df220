"""``Linear``: the affine layer ``y = x @ weight.T + bias``, applied to the last axis of its input.

Example::

    import numpy as np, nbcoll
    layer = nbcoll.nn.Linear(4, 2)
    y = layer(nbcoll.tensor(np.ones((8, 4), np.float32)))     # shape (8, 2)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nbcoll.nn import init
from nbcoll.nn.module import Module
from nbcoll.nn.parameter import Parameter
from nbcoll.nn.shapes import check_input, positive_int
from nbcoll.tensors import Tensor
from nbcoll.tensors.dtypes import get_default_dtype


def parameter_dtype(dtype: Any) -> np.dtype:
    """The dtype a layer gives its parameters: ``dtype`` if given, else ``nbcoll.get_default_dtype()``."""
    return get_default_dtype() if dtype is None else np.dtype(dtype)


class Linear(Module):
    """``for each row x: y[o] = sum_i x[i] * weight[o, i] + bias[o]``; weight is (out_features, in_features).

    Input ``(*, in_features)``, output ``(*, out_features)``. Initialised as PyTorch's: weight and bias uniform in
    ``[-1/sqrt(in_features), 1/sqrt(in_features)]`` (``kaiming_uniform_`` with ``a = sqrt(5)`` for the weight).

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> layer = nn.Linear(3, 2, bias=False)
        >>> layer.weight.shape
        (2, 3)
        >>> layer(nbcoll.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).shape
        (2, 2)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype: Any = None) -> None:
        super().__init__()
        self.in_features = positive_int(in_features, "in_features")
        self.out_features = positive_int(out_features, "out_features")
        dtype = parameter_dtype(dtype)
        self.weight = Parameter(np.zeros((self.out_features, self.in_features), dtype))
        if bias:
            self.bias = Parameter(np.zeros(self.out_features, dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the weight and bias again from their initial distributions (the seed decides the values).

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> layer = nn.Linear(2, 2)
        >>> nbcoll.manual_seed(0)
        >>> layer.reset_parameters()
        >>> first = layer.weight.numpy()
        >>> nbcoll.manual_seed(0)
        >>> layer.reset_parameters()
        >>> bool((layer.weight.numpy() == first).all())         # the same seed, the same start
        True
        """
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (..., self.in_features), dtype=self.weight.dtype)
        y = x @ self.weight.T
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    """Returns its input unchanged (a placeholder: a Residual without projection uses it).

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> x = nbcoll.tensor([1.0])
        >>> nn.Identity()(x) is x
        True
    """

    def forward(self, x: Any) -> Any:
        return x


__all__ = ["Identity", "Linear", "parameter_dtype"]
