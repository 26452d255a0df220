"""``Embedding``: a table of vectors looked up by integer id (tokens, characters, classes).

Example::

    table = nbcoll.nn.Embedding(10, 4)
    vectors = table(nbcoll.tensor([[1, 2], [9, 0]]))     # shape (2, 2, 4)
"""

from __future__ import annotations

from typing import Any

import numpy as np

import nbcoll.functional as F
from nbcoll.kernels.index import check_indices
from nbcoll.nn import init
from nbcoll.nn.linear import parameter_dtype
from nbcoll.nn.module import Module
from nbcoll.nn.parameter import Parameter
from nbcoll.nn.shapes import describe, positive_int
from nbcoll.tensors import Tensor


class Embedding(Module):
    """``y[..., :] = weight[ids[...], :]``: ids of any shape give ``ids.shape + (embedding_dim,)``.

    ``weight`` is ``(num_embeddings, embedding_dim)``, initialised from N(0, 1) as in PyTorch. The backward pass
    adds the gradient of every position into its row; rows used twice receive the sum.

    Example::

        table = Embedding(5, 3)
        table(nbcoll.tensor([4, 4])).shape       # (2, 3)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings = positive_int(num_embeddings, "num_embeddings")
        self.embedding_dim = positive_int(embedding_dim, "embedding_dim")
        self.weight = Parameter(np.zeros((self.num_embeddings, self.embedding_dim), parameter_dtype(dtype)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)

    def forward(self, ids: Any) -> Tensor:
        ids = ids if isinstance(ids, Tensor) else Tensor(np.asarray(ids))
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{describe(self)}: expected integer ids, got dtype {ids.dtype}")
        check_indices(ids.data, self.num_embeddings, f"{describe(self)}: input")
        return F.embedding(ids, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


__all__ = ["Embedding"]
