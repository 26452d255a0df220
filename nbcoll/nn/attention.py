"""Attention: MultiheadAttention, the feed-forward block, and a pre-norm TransformerBlock built from them.

For queries q (L of them), keys k and values v (S of them), split into ``num_heads`` heads of ``head_dim``::

    for each head:  scores = q_h @ k_h^T / sqrt(head_dim) + mask       (L, S); mask is 0 or -inf
                    weights = softmax(scores, over S)
                    out_h = weights @ v_h                               (L, head_dim)
    out = concat over heads of out_h, then out_proj

The layout is chosen for a later tensor-parallel split: q, k and v are separate ``Linear`` layers (``q_proj``,
``k_proj``, ``v_proj``) whose output rows are grouped by head, and the number of heads is read from their output
width at run time. A rank that keeps the rows of some heads (column-parallel q/k/v) and the matching input
columns of ``out_proj`` (row-parallel) runs the same code on its heads; one sum over ranks completes out_proj.
The feed-forward block is the same story: ``fc_in`` column-parallel, ``fc_out`` row-parallel.

Example::

    block = nn.TransformerBlock(embed_dim=32, num_heads=4, causal=True)
    y = block(x)                                   # x (batch, seq, 32) -> (batch, seq, 32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nbcoll.nn.activation import GELU
from nbcoll.nn.dropout import Dropout
from nbcoll.nn.linear import Linear
from nbcoll.nn.module import Module
from nbcoll.nn.norm import LayerNorm
from nbcoll.nn.shapes import check_input, describe
from nbcoll.tensors import Tensor


def causal_mask(queries: int, keys: int) -> np.ndarray:
    """The additive mask that hides the future: ``mask[i, j] = -inf`` where ``j > i``, else 0 (float64, host)."""
    return np.where(np.triu(np.ones((queries, keys), bool), k=1), -np.inf, 0.0)


def _additive(mask: Any, arg: str) -> np.ndarray:
    """A mask as host floats to add to the scores: a bool mask hides its True entries (PyTorch's rule)."""
    host = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
    if host.dtype == np.bool_:
        return np.where(host, -np.inf, 0.0)
    if host.dtype.kind != "f":
        raise TypeError(f"{arg}: expected a bool mask or float values to add, got dtype {host.dtype}")
    return host.astype(np.float64)


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: np.ndarray | None = None, dropout: Module | None = None
) -> tuple[Tensor, Tensor]:
    """``softmax(q @ k^T / sqrt(d) + mask) @ v`` over the last two axes; returns the output and the weights.

    ``q`` (..., L, d), ``k`` (..., S, d), ``v`` (..., S, dv); ``mask`` broadcasts to (..., L, S). ``dropout``
    (a module) drops attention weights before they meet ``v``; the weights returned are those before dropout.
    """
    scores = (q @ k.transpose(*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores + Tensor(mask.astype(scores.dtype))
    weights = scores.softmax(axis=-1)
    return (weights if dropout is None else dropout(weights)) @ v, weights


class MultiheadAttention(Module):
    """Multi-head attention with PyTorch's shapes: (L, N, E) inputs, or (N, L, E) with ``batch_first=True``.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> attn = nn.MultiheadAttention(embed_dim=8, num_heads=2, batch_first=True)
        >>> x = nbcoll.tensor(np.ones((3, 5, 8), np.float32))           # (N, L, E)
        >>> out, weights = attn(x, x, x, is_causal=True)
        >>> out.shape, weights.shape
        ((3, 5, 8), (3, 5, 5))
        >>> weights.numpy()[0, 1]                                       # position 1 sees positions 0 and 1 only
        array([0.5, 0.5, 0. , 0. , 0. ], dtype=float32)
        >>> pad = nbcoll.tensor(np.array([[False] * 4 + [True]] * 3))     # True marks keys to ignore
        >>> out, _ = attn(x, key_padding_mask=pad)

    ``key`` defaults to ``query`` and ``value`` to ``key``. ``attn_mask`` is (L, S) or (N * num_heads, L, S), bool
    (True hides) or float (added to the scores); ``is_causal=True`` hides every later position. ``weights`` are
    averaged over the heads unless ``average_attn_weights=False`` (then (N, num_heads, L, S)), and None when
    ``need_weights=False``. Unbatched inputs (L, E) are accepted too.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        bias: bool = True,
        batch_first: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        dropout: float = 0.0,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"num_heads: must divide embed_dim={embed_dim}, got {num_heads}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.batch_first = batch_first
        self.q_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        self.k_proj = Linear(self.kdim, embed_dim, bias=bias, dtype=dtype)
        self.v_proj = Linear(self.vdim, embed_dim, bias=bias, dtype=dtype)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        self.attn_dropout = Dropout(dropout)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"

    def _batch_major(self, x: Any, width: int, name: str) -> tuple[Tensor, bool]:
        """``x`` as (N, length, width) and whether it was batched."""
        batched = ("N", "length", width) if self.batch_first else ("length", "N", width)
        x = check_input(self, x, [batched, ("length", width)], name=name, dtype=self.q_proj.weight.dtype)
        if x.ndim == 2:
            return x.reshape(1, *x.shape), False
        return (x if self.batch_first else x.transpose(1, 0, 2)), True

    def _heads(self, x: Tensor) -> Tensor:
        """(N, length, heads * head_dim) -> (N, heads, length, head_dim); the head count comes from x's width."""
        n, length, width = x.shape
        return x.reshape(n, length, width // self.head_dim, self.head_dim).transpose(0, 2, 1, 3)

    def _mask(self, attn_mask: Any, key_padding_mask: Any, is_causal: bool, shape: tuple[int, ...]) -> Any:
        """Every mask as one additive host array that broadcasts to the scores (N, heads, L, S), or None."""
        n, heads, length, keys = shape
        total = np.zeros((1, 1, length, keys))
        if is_causal:
            total = total + causal_mask(length, keys)
        if attn_mask is not None:
            mask = _additive(attn_mask, "attn_mask")
            if mask.shape == (length, keys):
                total = total + mask
            elif mask.shape == (n * self.num_heads, length, keys):
                total = total + mask.reshape(n, self.num_heads, length, keys)
            else:
                raise ValueError(
                    f"{describe(self)}: expected attn_mask of shape ({length}, {keys}) or "
                    f"({n * self.num_heads}, {length}, {keys}), got {mask.shape}"
                )
        if key_padding_mask is not None:
            mask = _additive(key_padding_mask, "key_padding_mask")
            if mask.shape not in ((n, keys), (keys,)):
                raise ValueError(
                    f"{describe(self)}: expected key_padding_mask of shape ({n}, {keys}), got {mask.shape}"
                )
            total = total + mask.reshape(-1, 1, 1, keys)
        return total if (is_causal or attn_mask is not None or key_padding_mask is not None) else None

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        key = query if key is None else key
        value = key if value is None else value
        query, batched = self._batch_major(query, self.embed_dim, "query")
        key, _ = self._batch_major(key, self.kdim, "key")
        value, _ = self._batch_major(value, self.vdim, "value")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(
                f"{describe(self)}: query, key and value must share the batch size, and key and value the length; "
                f"got (batch, length) {query.shape[:2]}, {key.shape[:2]}, {value.shape[:2]}"
            )
        q, k, v = self._heads(self.q_proj(query)), self._heads(self.k_proj(key)), self._heads(self.v_proj(value))
        mask = self._mask(attn_mask, key_padding_mask, is_causal, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
        out, weights = scaled_dot_product_attention(q, k, v, mask, self.attn_dropout)
        n, heads, length, _ = out.shape
        out = self.out_proj(out.transpose(0, 2, 1, 3).reshape(n, length, heads * self.head_dim))
        if not need_weights:
            weights = None
        elif average_attn_weights:
            weights = weights.mean(axis=1)
        if not batched:
            return out.reshape(out.shape[1:]), None if weights is None else weights.reshape(weights.shape[1:])
        return (out if self.batch_first else out.transpose(1, 0, 2)), weights


class FeedForward(Module):
    """The transformer's position-wise MLP: ``fc_out(gelu(fc_in(x)))``, widening to ``hidden_dim`` in between.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> mlp = nn.FeedForward(8, 32)
        >>> mlp(nbcoll.tensor(np.ones((2, 3, 8), np.float32))).shape      # (*, 8) -> (*, 8)
        (2, 3, 8)

    GELU is the tanh form by default (GPT-2's); ``approximate="none"`` gives the exact one.
    """

    def __init__(
        self, embed_dim: int, hidden_dim: int, bias: bool = True, approximate: str = "tanh", dtype: Any = None
    ) -> None:
        super().__init__()
        self.fc_in = Linear(embed_dim, hidden_dim, bias=bias, dtype=dtype)
        self.act = GELU(approximate)
        self.fc_out = Linear(hidden_dim, embed_dim, bias=bias, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(self.act(self.fc_in(x)))


class TransformerBlock(Module):
    """A pre-norm transformer block: ``x = x + attn(ln1(x)); x = x + mlp(ln2(x))``, on (N, L, E) inputs.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> block = nn.TransformerBlock(embed_dim=8, num_heads=2, causal=True)
        >>> x = nbcoll.tensor(np.ones((2, 5, 8), np.float32))
        >>> block(x).shape                                   # (N, L, 8): each position sees only its past
        (2, 5, 8)
        >>> pad = nbcoll.tensor(np.array([[False] * 5, [False] * 3 + [True] * 2]))
        >>> block(x, key_padding_mask=pad).shape             # True marks padding
        (2, 5, 8)

    The sub-modules are ``ln1``, ``attn`` (a batch-first MultiheadAttention: ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj``), ``ln2`` and ``mlp`` (``fc_in``, ``fc_out``); ``mlp_ratio`` sets the MLP's width. ``dropout``
    applies to the attention weights and to both branches before they are added back, in training only.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        causal: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
        eps: float = 1e-5,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.embed_dim, self.causal = embed_dim, causal
        self.ln1 = LayerNorm(embed_dim, eps=eps, dtype=dtype)
        self.attn = MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True, dropout=dropout, dtype=dtype)
        self.ln2 = LayerNorm(embed_dim, eps=eps, dtype=dtype)
        self.mlp = FeedForward(embed_dim, int(round(mlp_ratio * embed_dim)), bias=bias, dtype=dtype)
        self.resid_dropout = Dropout(dropout)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.attn.num_heads}, causal={self.causal}"

    def forward(self, x: Tensor, attn_mask: Any = None, key_padding_mask: Any = None) -> Tensor:
        x = check_input(self, x, ("N", "L", self.embed_dim), dtype=self.attn.q_proj.weight.dtype)
        h = self.ln1(x)
        attended, _ = self.attn(
            h, h, h, key_padding_mask=key_padding_mask, need_weights=False, attn_mask=attn_mask, is_causal=self.causal
        )
        x = x + self.resid_dropout(attended)
        return x + self.resid_dropout(self.mlp(self.ln2(x)))


__all__ = ["FeedForward", "MultiheadAttention", "TransformerBlock", "causal_mask", "scaled_dot_product_attention"]
