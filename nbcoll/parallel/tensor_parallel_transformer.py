"""The transformer block split across ranks: attention heads and MLP features, one all-reduce each way per half.

It mirrors :class:`nbcoll.nn.TransformerBlock` name for name (``ln1``, ``attn.q_proj/k_proj/v_proj/out_proj``,
``ln2``, ``mlp.fc_in/fc_out``), so :func:`tensor_parallel_block` builds it from a full block's weights::

    attention: x --f--> q, k, v column parallel (this rank's heads) --> attention per head --> out_proj row --g-->
    MLP:       x --f--> fc_in column parallel --gelu--> fc_out row parallel --g-->

A head never spans two ranks, so attention itself needs no communication: each rank's q, k and v rows are whole
heads, and its ``out_proj`` columns are those heads' outputs.

Example::

    block = nn.TransformerBlock(32, num_heads=4, causal=True)
    split = tensor_parallel_block(block, comm)      # on 2 ranks: 2 heads and 64 of the 128 MLP features each
    y = split(x)                                    # equals block(x) on every rank
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbcoll.nn import Dropout, LayerNorm, Module, TransformerBlock
from nbcoll.nn.shapes import check_input
from nbcoll.parallel.sequence_parallel import sequence_parallel_block
from nbcoll.parallel.tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    divide,
    load_full_state,
)
from nbcoll.parallel.tensor_parallel_attention import ParallelAttention as ParallelAttention
from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


class ParallelMLP(Module):
    """``fc_out(gelu(fc_in(x)))`` with the ``hidden_dim`` features split across ranks.

    Example::

        mlp = ParallelMLP(32, 128, comm)            # on 4 ranks: 32 hidden features each
        y = mlp(x)                                  # (.., 32) -> (.., 32) on every rank
    """

    def __init__(self, embed_dim: int, hidden_dim: int, comm: Communicator, bias: bool = True, dtype=None) -> None:
        super().__init__()
        self.fc_in = ColumnParallelLinear(embed_dim, hidden_dim, comm, bias, dtype=dtype)
        self.fc_out = RowParallelLinear(hidden_dim, embed_dim, comm, bias, input_is_parallel=True, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(self.fc_in(x).gelu())


class ParallelTransformerBlock(Module):
    """The pre-norm block of :class:`nbcoll.nn.TransformerBlock`, attention and MLP split across ``comm``.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel import ParallelTransformerBlock
        >>> comm = nbcoll.init()
        >>> block = ParallelTransformerBlock(8, num_heads=2, comm=comm, causal=True)
        >>> block(nbcoll.tensor(np.ones((2, 5, 8), np.float32))).shape       # (N, L, 8) -> (N, L, 8)
        (2, 5, 8)
        >>> comm.destroy()

    ``num_heads`` and the MLP width (``mlp_ratio * embed_dim``) must divide by ``comm.size``. ``dropout`` drops
    what one process's block drops, given the same seed on every rank (:mod:`nbcoll.parallel.split_dropout`):
    the attention weights of this rank's heads, and the residual branches, which are whole on every rank. There
    is no padding mask.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        comm: Communicator,
        mlp_ratio: float = 4.0,
        causal: bool = False,
        bias: bool = True,
        eps: float = 1e-5,
        dtype: Any = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embed_dim, self.causal = embed_dim, causal
        hidden = int(round(mlp_ratio * embed_dim))
        divide(hidden, comm, "hidden size (mlp_ratio * embed_dim)")
        self.ln1 = LayerNorm(embed_dim, eps=eps, dtype=dtype)
        self.attn = ParallelAttention(embed_dim, num_heads, comm, causal, bias, dtype, dropout)
        self.ln2 = LayerNorm(embed_dim, eps=eps, dtype=dtype)
        self.mlp = ParallelMLP(embed_dim, hidden, comm, bias=bias, dtype=dtype)
        self.resid_dropout = Dropout(dropout)  # on whole tensors, the same on every rank: one process's mask

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, ("N", "L", self.embed_dim), dtype=self.ln1.weight.dtype)
        x = x + self.resid_dropout(self.attn(self.ln1(x)))
        return x + self.resid_dropout(self.mlp(self.ln2(x)))


def tensor_parallel_block(
    block: TransformerBlock, comm: Communicator, sequence_parallel: bool = False
) -> Module:  # a ParallelTransformerBlock, or a SequenceParallelBlock with sequence_parallel=True
    """A :class:`ParallelTransformerBlock` holding this rank's shards of ``block``'s weights.

    ``sequence_parallel=True`` gives the :class:`~nbcoll.parallel.sequence_parallel.SequenceParallelBlock` of
    :func:`~nbcoll.parallel.sequence_parallel.sequence_parallel_block` instead, on this rank's positions.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import tensor_parallel_block
        >>> comm = nbcoll.init()
        >>> block = nn.TransformerBlock(8, 2)
        >>> split = tensor_parallel_block(block, comm)              # the same weights, this rank's heads and columns
        >>> x = nbcoll.tensor(np.random.default_rng(0).random((1, 3, 8)).astype(np.float32))
        >>> bool(np.allclose(split(x).numpy(), block(x).numpy(), atol=1e-5))
        True
        >>> comm.destroy()
    """
    if sequence_parallel:
        return sequence_parallel_block(block, comm)
    attn = block.attn
    split = ParallelTransformerBlock(
        block.embed_dim,
        attn.num_heads,
        comm,
        mlp_ratio=block.mlp.fc_in.out_features / block.embed_dim,
        causal=block.causal,
        bias=attn.q_proj.bias is not None,
        eps=block.ln1.eps,
        dtype=attn.q_proj.weight.dtype,
        dropout=block.resid_dropout.p,
    )
    return load_full_state(split, block.state_dict(), comm)


__all__ = ["ParallelAttention", "ParallelMLP", "ParallelTransformerBlock", "tensor_parallel_block"]
