"""Self-attention split across ranks by heads: q, k and v column parallel, ``out_proj`` row parallel.

A head never spans two ranks, so attention itself needs no communication: each rank's q, k and v rows are whole
heads, and its ``out_proj`` columns are those heads' outputs. :class:`ParallelAttention` is the attention half of
:class:`~nbcoll.parallel.tensor_parallel_transformer.ParallelTransformerBlock`, and the base of the sequence-parallel
:class:`~nbcoll.parallel.sequence_parallel.SequenceParallelAttention`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbcoll.nn import Module
from nbcoll.nn.attention import causal_mask, scaled_dot_product_attention
from nbcoll.parallel.split_dropout import SplitDropout
from nbcoll.parallel.tensor_parallel import ColumnParallelLinear, RowParallelLinear, copy_to_region, divide
from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


class ParallelAttention(Module):
    """Batch-first self-attention with ``num_heads / comm.size`` heads on each rank.

    Example::

        attn = ParallelAttention(32, num_heads=4, comm=comm, causal=True)
        y = attn(x)                                 # x (N, L, 32) -> (N, L, 32), the full result on every rank
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        comm: Communicator,
        causal: bool = False,
        bias: bool = True,
        dtype: Any = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"num_heads: must divide embed_dim={embed_dim}, got {num_heads}")
        self.comm, self.embed_dim, self.causal = comm, embed_dim, causal
        self.local_heads = divide(num_heads, comm, "num_heads")
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        for name in ("q_proj", "k_proj", "v_proj"):  # f is applied once, to the shared input
            setattr(self, name, ColumnParallelLinear(embed_dim, embed_dim, comm, bias, dtype=dtype))
        self.out_proj = RowParallelLinear(embed_dim, embed_dim, comm, bias, input_is_parallel=True, dtype=dtype)
        self.attn_dropout = SplitDropout(dropout, axis=1, part=comm.rank, parts=comm.size)  # this rank's heads

    def _heads(self, x: Tensor) -> Tensor:
        n, length, _ = x.shape  # (N, L, local_heads * head_dim) -> (N, local_heads, L, head_dim)
        return x.reshape(n, length, self.local_heads, self.head_dim).transpose(0, 2, 1, 3)

    def _enter(self, x: Tensor) -> Tensor:
        """The input every rank's heads read: here the whole sequence, copied into the region (f)."""
        return copy_to_region(x, self.comm)

    def forward(self, x: Tensor) -> Tensor:
        x = self._enter(x)
        q, k, v = (self._heads(proj.local_forward(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        mask = causal_mask(x.shape[1], x.shape[1]) if self.causal else None
        out, _ = scaled_dot_product_attention(q, k, v, mask, self.attn_dropout)
        n, heads, length, _ = out.shape
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(n, length, heads * self.head_dim))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, heads {self.local_heads} of {self.num_heads} on this rank"


__all__ = ["ParallelAttention"]
