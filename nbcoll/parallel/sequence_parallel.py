"""Sequence parallelism, Megatron style: the tensor-parallel block with its norms and dropouts split along the sequence.

In a tensor-parallel block every rank holds the whole ``(N, L, E)`` activation outside the split layers, and
computes the same layer norms, dropouts and residual adds as every other rank. Sequence parallelism splits that
work along the sequence instead: rank ``r`` keeps positions ``[r * L / n, (r + 1) * L / n)``. The all-reduce
that ends each split region becomes a reduce-scatter (each rank keeps the sum for its positions only), and the
region's entrance an all-gather (attention and the MLP need every position)::

    tensor parallel:    x --f (identity)--> [column .. row] --g (all-reduce)-------> x + .    (N, L, E) everywhere
    sequence parallel:  x_r --all-gather--> [column .. row] --reduce-scatter--> x_r + .     (N, L / n, E) on rank r
    backward:           dx_r <-reduce-scatter-- ...  ... <--all-gather-- dy_r

An all-gather and a reduce-scatter move what one all-reduce moves (an all-reduce *is* a reduce-scatter followed
by an all-gather), so the traffic of the activations is unchanged while the activations saved outside the
split regions shrink ``n`` times. The replicated parameters that now see only part of the sequence (the layer
norms' weights and biases, the bias of each row-parallel layer) get their gradients summed over the ranks: they
pass through Megatron's ``f``, whose backward is an all-reduce, each time they are used.

Dropout equals one process's (:mod:`nbcoll.parallel.split_dropout`): each rank draws the mask of the whole
tensor from the shared seed, as one process does, and keeps its own part (its positions outside the split
regions, its heads inside). That costs one full-size temporary mask per dropout; Megatron instead draws each
rank's part from a seed of its own, which gives different, equally valid masks.

The sequence length must divide by the rank count, as in Megatron; another length is refused.

Example::

    block = nn.TransformerBlock(32, num_heads=4, causal=True)
    split = sequence_parallel_block(block, comm)     # or tensor_parallel_block(block, comm, sequence_parallel=True)
    y_r = split(split_sequence(x, comm))              # this rank's positions of block(x)
    y = gather_sequence(y_r, comm)                    # every position, on every rank
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import nbcoll.functional as F
from nbcoll.kernels import copy as copy_kernels
from nbcoll.nn import LayerNorm, Module, TransformerBlock
from nbcoll.nn.shapes import check_input
from nbcoll.parallel import functional as PF
from nbcoll.parallel.functional import _all_gather
from nbcoll.parallel.split_dropout import SplitDropout
from nbcoll.parallel.tensor_parallel import (
    ColumnParallelLinear,
    GatherFromRegion,
    RowParallelLinear,
    copy_to_region,
    divide,
    load_full_state,
)
from nbcoll.parallel.tensor_parallel_attention import ParallelAttention
from nbcoll.tensors import Tensor
from nbcoll.tensors.function import Context, Function

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


def _sequence_first(x: Tensor) -> Tensor:
    """(N, L, ...) <-> (L, N, ...): the collectives split and stack along dim 0. Its own inverse."""
    return x.transpose(1, 0, *range(2, x.ndim))


def _check_length(x: Tensor, comm: Communicator, arg: str = "x") -> None:
    if x.ndim < 2 or x.shape[1] % comm.size:
        raise ValueError(
            f"{arg}: sequence parallelism splits dim 1 (the sequence) into {comm.size} equal parts, one per rank; "
            f"got shape {tuple(x.shape)}"
        )


# -- entering and leaving the sequence-split model: a replicated tensor <-> this rank's positions --------------


class SplitToRegion(Function):
    """``y = block rank of x along dim 0``; backward all-gathers, as every rank's x was the same tensor."""

    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator) -> Any:
        ctx.comm = comm
        rows = x.shape[0] // comm.size
        return copy_kernels.contiguous(x[comm.rank * rows : (comm.rank + 1) * rows])

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        return _all_gather(ctx.comm, dy), None


def split_sequence(x: Tensor, comm: Communicator) -> Tensor:
    """This rank's positions of a tensor that every rank holds whole: ``x[:, r * L / n : (r + 1) * L / n]``.

    Backward all-gathers the gradient, so replicated layers before it (an embedding) get the full gradient.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel import split_sequence
    >>> comm = nbcoll.init()                       # on 2 ranks: (1, 2, 3) each, rank 1 holding positions 2 and 3
    >>> split_sequence(nbcoll.tensor(np.ones((1, 4, 3))), comm).shape
    (1, 4, 3)
    >>> comm.destroy()
    """
    _check_length(x, comm)
    return _sequence_first(SplitToRegion.apply(_sequence_first(x), comm))


def gather_sequence(x: Tensor, comm: Communicator) -> Tensor:
    """Every rank's positions put back together along dim 1, on every rank: the inverse of :func:`split_sequence`.

    Backward keeps this rank's positions of the gradient: use it where every rank computes the same loss from
    the whole sequence (a replicated head and loss after the last block).

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel import gather_sequence
    >>> comm = nbcoll.init()                       # on 2 ranks: (1, 4, 3) from two (1, 2, 3)
    >>> gather_sequence(nbcoll.tensor(np.ones((1, 2, 3))), comm).shape
    (1, 2, 3)
    >>> comm.destroy()
    """
    return _sequence_first(GatherFromRegion.apply(_sequence_first(x), comm))


# -- the two region operators, around the tensor-parallel layers ------------------------------------------------


def all_gather_sequence(x: Tensor, comm: Communicator) -> Tensor:
    """Enter a tensor-parallel region: every position, all-gathered along dim 1; backward reduce-scatters.

    Each rank's split layers use every position, so the gradient of this rank's positions sums every rank's.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel import all_gather_sequence
    >>> comm = nbcoll.init()                       # on n ranks: (N, L / n, E) -> (N, L, E)
    >>> all_gather_sequence(nbcoll.tensor(np.ones((2, 3, 4))), comm).shape
    (2, 3, 4)
    >>> comm.destroy()
    """
    return _sequence_first(PF.all_gather(_sequence_first(x), comm))


def reduce_scatter_sequence(x: Tensor, comm: Communicator) -> Tensor:
    """Leave a tensor-parallel region: the sum over ranks of ``x``, this rank's positions only; backward all-gathers.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel import reduce_scatter_sequence
    >>> comm = nbcoll.init()                       # on n ranks: (N, L, E) partial sums -> (N, L / n, E) totals
    >>> reduce_scatter_sequence(nbcoll.tensor(np.ones((2, 4, 3))), comm).shape
    (2, 4, 3)
    >>> comm.destroy()
    """
    _check_length(x, comm)
    return _sequence_first(PF.reduce_scatter(_sequence_first(x), comm))


# -- the layers ------------------------------------------------------------------------------------------------


class SequenceParallelLayerNorm(LayerNorm):
    """A LayerNorm on this rank's positions; its weight and bias gradients are summed over ``comm``'s ranks.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel.sequence_parallel import SequenceParallelLayerNorm
    >>> comm = nbcoll.init()
    >>> SequenceParallelLayerNorm(4, comm)(nbcoll.tensor(np.ones((2, 1, 4), np.float32))).shape
    (2, 1, 4)
    >>> comm.destroy()
    """

    def __init__(self, embed_dim: int, comm: Communicator, eps: float = 1e-5, dtype: Any = None) -> None:
        super().__init__(embed_dim, eps=eps, dtype=dtype)
        self.comm = comm

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (..., *self.normalized_shape), dtype=self.weight.dtype)
        weight, bias = copy_to_region(self.weight, self.comm), copy_to_region(self.bias, self.comm)
        return F.layer_norm(x, weight, bias, self.eps)


class SequenceRowParallelLinear(RowParallelLinear):
    """A :class:`RowParallelLinear` that reduce-scatters along the sequence instead of all-reducing.

    The bias is added to this rank's positions, so its gradient is summed over the ranks.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel.sequence_parallel import SequenceRowParallelLinear
    >>> comm = nbcoll.init()                       # on n ranks: (N, L, 8 / n) -> (N, L / n, 3)
    >>> SequenceRowParallelLinear(8, 3, comm)(nbcoll.tensor(np.ones((1, 2, 8 // comm.size), np.float32))).shape
    (1, 2, 3)
    >>> comm.destroy()
    """

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, ("N", "L", self.local_in), dtype=self.weight.dtype)
        y = reduce_scatter_sequence(x @ self.weight.T, self.comm)
        return y if self.bias is None else y + copy_to_region(self.bias, self.comm)


class SequenceParallelAttention(ParallelAttention):
    """:class:`ParallelAttention` from and to this rank's positions: all-gather in, reduce-scatter out.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel.sequence_parallel import SequenceParallelAttention
    >>> comm = nbcoll.init()
    >>> SequenceParallelAttention(8, 2, comm, causal=True)(nbcoll.tensor(np.ones((1, 3, 8), np.float32))).shape
    (1, 3, 8)
    >>> comm.destroy()
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        comm: Communicator,
        causal: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__(embed_dim, num_heads, comm, causal=causal, bias=bias, dtype=dtype)
        self.out_proj = SequenceRowParallelLinear(embed_dim, embed_dim, comm, bias, dtype=dtype)
        self.attn_dropout = SplitDropout(dropout, axis=1, part=comm.rank, parts=comm.size)  # this rank's heads

    def _enter(self, x: Tensor) -> Tensor:
        """This rank's positions, all-gathered into the whole sequence; the rest is ParallelAttention's forward,
        whose ``out_proj`` here reduce-scatters back to this rank's positions."""
        return all_gather_sequence(x, self.comm)


class SequenceParallelMLP(Module):
    """``fc_out(gelu(fc_in(x)))`` from and to this rank's positions, the hidden features split across ranks.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel.sequence_parallel import SequenceParallelMLP
    >>> comm = nbcoll.init()
    >>> SequenceParallelMLP(4, 16, comm)(nbcoll.tensor(np.ones((1, 2, 4), np.float32))).shape
    (1, 2, 4)
    >>> comm.destroy()
    """

    def __init__(self, embed_dim: int, hidden_dim: int, comm: Communicator, bias: bool = True, dtype=None) -> None:
        super().__init__()
        self.comm = comm
        self.fc_in = ColumnParallelLinear(embed_dim, hidden_dim, comm, bias, dtype=dtype)
        self.fc_out = SequenceRowParallelLinear(hidden_dim, embed_dim, comm, bias, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(self.fc_in.local_forward(all_gather_sequence(x, self.comm)).gelu())


class SequenceParallelBlock(Module):
    """The pre-norm :class:`nbcoll.nn.TransformerBlock` on this rank's positions, its layers split over ``comm``.

    Input and output are ``(N, L / n, E)``: positions ``[r * L / n, (r + 1) * L / n)`` on rank ``r`` (see
    :func:`split_sequence`). ``num_heads``, the MLP width and the full sequence length must divide by
    ``comm.size``. ``dropout`` drops what one process's block drops, given the same seed.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel import SequenceParallelBlock, gather_sequence, split_sequence
        >>> comm = nbcoll.init()
        >>> block = SequenceParallelBlock(8, num_heads=2, comm=comm, causal=True)
        >>> x = nbcoll.tensor(np.ones((2, 6, 8), np.float32))
        >>> gather_sequence(block(split_sequence(x, comm)), comm).shape       # (N, L, 8) -> (N, L, 8)
        (2, 6, 8)
        >>> comm.destroy()
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        comm: Communicator,
        mlp_ratio: float = 4.0,
        causal: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
        eps: float = 1e-5,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.embed_dim, self.causal = embed_dim, causal
        hidden = int(round(mlp_ratio * embed_dim))
        divide(hidden, comm, "hidden size (mlp_ratio * embed_dim)")
        self.ln1 = SequenceParallelLayerNorm(embed_dim, comm, eps=eps, dtype=dtype)
        self.attn = SequenceParallelAttention(embed_dim, num_heads, comm, causal, dropout, bias, dtype=dtype)
        self.ln2 = SequenceParallelLayerNorm(embed_dim, comm, eps=eps, dtype=dtype)
        self.mlp = SequenceParallelMLP(embed_dim, hidden, comm, bias=bias, dtype=dtype)
        self.resid_dropout = SplitDropout(dropout, axis=1, part=comm.rank, parts=comm.size)  # this rank's positions

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, ("N", "L / ranks", self.embed_dim), dtype=self.ln1.weight.dtype)
        x = x + self.resid_dropout(self.attn(self.ln1(x)))
        return x + self.resid_dropout(self.mlp(self.ln2(x)))


def sequence_parallel_block(block: TransformerBlock, comm: Communicator) -> SequenceParallelBlock:
    """A :class:`SequenceParallelBlock` holding this rank's shards of ``block``'s weights, and its dropout.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import gather_sequence, sequence_parallel_block, split_sequence
        >>> comm = nbcoll.init()
        >>> block = nn.TransformerBlock(8, 2)
        >>> split = sequence_parallel_block(block, comm)
        >>> x = nbcoll.tensor(np.random.default_rng(0).random((1, 4, 8)).astype(np.float32))
        >>> y = gather_sequence(split(split_sequence(x, comm)), comm)
        >>> bool(np.allclose(y.numpy(), block(x).numpy(), atol=1e-5))
        True
        >>> comm.destroy()
    """
    attn = block.attn
    split = SequenceParallelBlock(
        block.embed_dim,
        attn.num_heads,
        comm,
        mlp_ratio=block.mlp.fc_in.out_features / block.embed_dim,
        causal=block.causal,
        dropout=block.resid_dropout.p,
        bias=attn.q_proj.bias is not None,
        eps=block.ln1.eps,
        dtype=attn.q_proj.weight.dtype,
    )
    if not block.training:
        split.eval()
    return load_full_state(split, block.state_dict(), comm)


__all__ = [
    "SequenceParallelAttention",
    "SequenceParallelBlock",
    "SequenceParallelLayerNorm",
    "SequenceParallelMLP",
    "SequenceRowParallelLinear",
    "SplitToRegion",
    "all_gather_sequence",
    "gather_sequence",
    "reduce_scatter_sequence",
    "sequence_parallel_block",
    "split_sequence",
]
