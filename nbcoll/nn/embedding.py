"""``Embedding``: a table of vectors looked up by integer id (tokens, characters, classes).

Example::

    table = nbcoll.nn.Embedding(10, 4)
    vectors = table(nbcoll.tensor([[1, 2], [9, 0]]))     # shape (2, 2, 4)
"""

from __future__ import annotations

from typing import Any

import numpy as np

import nbcoll.functional as F
from nbcoll.kernels.index_args import check_indices
from nbcoll.nn import init
from nbcoll.nn.linear import parameter_dtype
from nbcoll.nn.module import Module
from nbcoll.nn.parameter import Parameter, write_values
from nbcoll.nn.shapes import describe, positive_int
from nbcoll.tensors import Tensor


class Embedding(Module):
    """``y[..., :] = weight[ids[...], :]``: ids of any shape give ``ids.shape + (embedding_dim,)``.

    ``weight`` is ``(num_embeddings, embedding_dim)``, initialised from N(0, 1) as in PyTorch. The backward pass
    adds the gradient of every position into its row; rows used twice receive the sum. With ``padding_idx``, that
    row starts at zeros, positions holding it give zeros, and it receives no gradient (so it stays zeros).

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> table = nn.Embedding(5, 3, padding_idx=0)
        >>> rows = table(nbcoll.tensor([4, 0]))
        >>> rows.shape, rows.numpy()[1]                  # the padding row is zeros
        ((2, 3), array([0., 0., 0.], dtype=float32))
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, dtype: Any = None
    ) -> None:
        super().__init__()
        self.num_embeddings = positive_int(num_embeddings, "num_embeddings")
        self.embedding_dim = positive_int(embedding_dim, "embedding_dim")
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(
                    f"padding_idx: expected an index in [-{num_embeddings}, {num_embeddings}), got {padding_idx}"
                )
            padding_idx = int(padding_idx) % self.num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(np.zeros((self.num_embeddings, self.embedding_dim), parameter_dtype(dtype)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table again from N(0, 1), with the ``padding_idx`` row back at zeros.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> table = nn.Embedding(4, 2, padding_idx=0)
        >>> table.reset_parameters()
        >>> table.weight.numpy()[0]
        array([0., 0.], dtype=float32)
        """
        init.normal_(self.weight)
        if self.padding_idx is not None:
            values = self.weight.numpy()
            values[self.padding_idx] = 0
            write_values(self.weight, values)

    def forward(self, ids: Any) -> Tensor:
        ids = ids if isinstance(ids, Tensor) else Tensor(np.asarray(ids))
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{describe(self)}: expected integer ids, got dtype {ids.dtype}")
        check_indices(ids.data, self.num_embeddings, f"{describe(self)}: input")
        vectors = F.embedding(ids, self.weight)
        if self.padding_idx is None:
            return vectors
        # Zeroing the padding positions also stops their gradient from reaching the padding row.
        keep = (ids != self.padding_idx).astype(vectors.dtype).reshape(*ids.shape, 1)
        return vectors * keep

    def extra_repr(self) -> str:
        padding = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{padding}"


__all__ = ["Embedding"]
