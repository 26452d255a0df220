"""Context parallelism: attention over a sequence split across the ranks, by ring attention or by Ulysses.

Each rank holds its block of the sequence for q, k and v, shaped (batch, heads, local_seq, head_dim) as
:func:`nbcoll.nn.attention.scaled_dot_product_attention` takes them. Two ways to attend over the whole sequence:

``ring_attention``: the query block stays put; the key/value blocks travel round the ring, one hop per step, and
each rank merges the partial results with the online softmax (what flash attention does over tiles)::

    for step in range(n):                        # the block of rank (rank - step) % n is here
        post the hop: this k, v block to rank + 1, the next from rank - 1 (into the other of two buffers)
        out_b, lse_b = attention of my q on this k, v block      lse = log of the row's sum of exp(scores)
        lse' = logaddexp(lse, lse_b)
        out  = out * exp(lse - lse') + out_b * exp(lse_b - lse')
        wait for the hop: the next block is here

So each hop is in flight while the block before it is computed on (:mod:`nbcoll.parallel.ring_attention_hops`
posts each hop as one ``comm.batch_isend_irecv``)::

    rank r, n = 3   step 0              step 1              step 2
    compute         q . kv[r]           q . kv[r-1]         q . kv[r-2]
    hop             kv[r]   -> r+1      kv[r-1] -> r+1
                    kv[r-1] <- r-1      kv[r-2] <- r-1
                    post ......... wait post ......... wait

Backward recomputes each block's scores from the saved ``lse`` (no softmax is kept) and sends the k, v blocks
round the other way, the next in flight under each compute as in forward. Their dK, dV accumulators follow a
step behind: the accumulator of the block being computed on arrives during that compute, is summed into after
it (in one rank's order, so the ring changes no bit of the result) and leaves under the next compute; after the
last step it reaches home. A rank holds its own block, the one it computes on and the one arriving.

Causal masking is load balanced by the zig-zag layout: the sequence is cut into ``2n`` chunks and rank ``r``
holds chunks ``r`` and ``2n-1-r`` (:func:`zigzag_split`, :func:`zigzag_merge`). A visiting block from a rank
``s < r`` is seen whole by both query chunks through its first chunk only; from ``s > r`` only the late query
chunk sees it, but whole. Either way a rank attends half a block per step, so every rank does the same work.
Uneven lengths are split unevenly, not padded: the chunks follow ``np.array_split``'s rule (the first
``seq_len % 2n`` are one longer), and the ranks exchange their local lengths once per call.

``ulysses_attention`` (DeepSpeed-Ulysses): an all-to-all turns the sequence split into a head split, each rank
runs ordinary attention on the full sequence for ``heads / n`` heads, and an all-to-all turns it back. It needs
``heads`` divisible by the ranks and, as nbcoll's all-to-all moves equal blocks, equal local lengths.

Example::

    comm = nbcoll.init()
    q, k, v = (zigzag_split(x, comm.size, comm.rank) for x in (q_full, k_full, v_full))
    out = ring_attention(q, k, v, comm, causal=True)          # this rank's rows of full causal attention
    full = zigzag_merge(all_ranks_out)                       # back in sequence order
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import nbcoll.functional as F
from nbcoll import memory
from nbcoll.nn.attention import causal_mask, scaled_dot_product_attention
from nbcoll.parallel.functional import all_to_all
from nbcoll.parallel.ring_attention_hops import RingHops
from nbcoll.tensors import Tensor, no_grad
from nbcoll.tensors.function import Context, Function

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

Chunks = list[tuple[int, int]]
"""One rank's part of the sequence: ``(chunk id, length)`` pairs in local order; ids order the chunks in time."""


# -- the zig-zag layout ------------------------------------------------------------------------------------------


def _check_world(size: Any, rank: Any) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size: expected a rank count >= 1, got {size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"rank: expected a rank in [0, {size}), got {rank!r}")


def zigzag_positions(seq_len: int, size: int, rank: int) -> np.ndarray:
    """The sequence positions rank ``rank`` of ``size`` holds: chunks ``rank`` and ``2 size - 1 - rank`` of 2 size.

    >>> from nbcoll.parallel.context_parallel import zigzag_positions
    >>> zigzag_positions(8, 2, 0), zigzag_positions(9, 2, 1)      # 9: the first chunk is one longer
    (array([0, 1, 6, 7]), array([3, 4, 5, 6]))
    """
    _check_world(size, rank)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 0:
        raise ValueError(f"seq_len: expected a length >= 0, got {seq_len!r}")
    chunks = np.array_split(np.arange(seq_len), 2 * size)
    return np.concatenate([chunks[rank], chunks[2 * size - 1 - rank]])


def zigzag_split(x: Any, size: int, rank: int, axis: int = 2) -> Any:
    """Rank ``rank``'s zig-zag block of the full sequence ``x`` (a Tensor, differentiably, or a NumPy array).

    >>> import numpy as np
    >>> from nbcoll.parallel.context_parallel import zigzag_split
    >>> zigzag_split(np.arange(8), size=2, rank=1, axis=0)          # chunks 1 and 2 of 0-1 | 2-3 | 4-5 | 6-7
    array([2, 3, 4, 5])
    """
    ndim = len(x.shape)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -ndim <= axis < ndim:
        raise ValueError(f"axis: expected an axis of x's {ndim}, got {axis!r}")
    positions = zigzag_positions(int(x.shape[axis]), size, rank)
    return x.index_select(axis, positions) if isinstance(x, Tensor) else np.take(x, positions, axis=axis)


def zigzag_merge(blocks: Sequence[Any], axis: int = 2) -> Any:
    """The full sequence back from every rank's zig-zag block, in rank order (Tensors or NumPy arrays).

    >>> import numpy as np
    >>> from nbcoll.parallel.context_parallel import zigzag_merge, zigzag_split
    >>> x = np.arange(7)
    >>> zigzag_merge([zigzag_split(x, 3, r, axis=0) for r in range(3)], axis=0)
    array([0, 1, 2, 3, 4, 5, 6])
    """
    if not len(blocks):
        raise ValueError("blocks: expected one block per rank, got none")
    seq_len = sum(int(b.shape[axis]) for b in blocks)
    order = np.concatenate([zigzag_positions(seq_len, len(blocks), r) for r in range(len(blocks))])
    back = np.argsort(order)  # where each position of the sequence sits in the rank-ordered concatenation
    if isinstance(blocks[0], Tensor):
        return F.concat(list(blocks), axis).index_select(axis, back)
    return np.take(np.concatenate(blocks, axis=axis), back, axis=axis)


# -- checks shared by both methods -------------------------------------------------------------------------------


def _check_qkv(q: Any, k: Any, v: Any, comm: Any) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or x.ndim != 4:
            got = f"shape {x.shape}" if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name}: expected a Tensor (batch, heads, local_seq, head_dim), got {got}")
    if k.shape != q.shape or v.shape[:3] != q.shape[:3] or not q.dtype == k.dtype == v.dtype:
        raise ValueError(
            f"k, v: expected k of q's shape {q.shape} and v of (batch, heads, local_seq) {q.shape[:3]}, all of "
            f"q's dtype {q.dtype}; got k {k.shape} {k.dtype}, v {v.shape} {v.dtype}"
        )
    if not hasattr(comm, "all_gather") or not hasattr(comm, "size"):
        raise TypeError(f"comm: expected an nbcoll Communicator, got {type(comm).__name__}")


def _local_lengths(comm: Communicator, length: int) -> list[int]:
    """Every rank's local sequence length, so that each rank can size the blocks it receives (and all refuse
    together: each sees the same list)."""
    mine = memory.to_device(np.array([length], np.int64))
    every = memory.zeros((comm.size,), np.int64)
    comm.all_gather(mine, every)
    return [int(n) for n in memory.to_host(every)]


def _layout(comm: Communicator, length: int, causal: bool) -> list[Chunks]:
    """Every rank's chunks. Without a mask, order does not matter: each rank's block is one chunk (any split)."""
    lengths = _local_lengths(comm, length)
    if not causal:
        if min(lengths) < 1:
            raise ValueError(f"q: every rank needs at least one position of the sequence, got local lengths {lengths}")
        return [[(0, n)] for n in lengths]
    n, seq_len = comm.size, sum(lengths)
    chunk = [len(c) for c in np.array_split(np.arange(seq_len), 2 * n)]
    want = [chunk[r] + chunk[2 * n - 1 - r] for r in range(n)]
    if lengths != want or seq_len < 2 * n:
        raise ValueError(
            f"q: causal ring attention takes the zig-zag layout (zigzag_split) of a sequence of at least 2 * ranks "
            f"= {2 * n} positions: local lengths {want} for {seq_len}, got {lengths}"
        )
    return [[(r, chunk[r]), (2 * n - 1 - r, chunk[2 * n - 1 - r])] for r in range(n)]


# -- ring attention: one block pair at a time ---------------------------------------------------------------------


def _visible(q_chunk: int, k_chunk: int, causal: bool) -> str | None:
    """How a query chunk sees a key chunk: whole, through the causal triangle, or not at all."""
    if not causal or k_chunk < q_chunk:
        return "whole"
    return "diagonal" if k_chunk == q_chunk else None


def _pieces(x: Any, chunks: Chunks) -> list[Tensor]:
    """A block (batch, heads, length, dim) cut into its chunks along the sequence."""
    return list(F.split(Tensor(x), [length for _, length in chunks], axis=2))


def _scores(q: Tensor, k: Tensor, seen: str) -> Tensor:
    """``q k^T / sqrt(d)``, the future hidden on a diagonal chunk pair (each row still sees its own position)."""
    scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(q.shape[-1]))
    if seen == "diagonal":
        scores = scores + Tensor(causal_mask(q.shape[2], k.shape[2]).astype(q.dtype))
    return scores


def _block_forward(q: Tensor, k: Tensor, v: Tensor, seen: str) -> tuple[Tensor, Tensor]:
    """This block's softmax-weighted values and the log-sum-exp of its scores, per query row."""
    scores = _scores(q, k, seen)
    top = scores.max(axis=-1, keepdims=True)
    weights = (scores - top).exp()
    total = weights.sum(axis=-1, keepdims=True)
    return (weights @ v) / total, top + total.log()


def _merge(state: tuple[Tensor, Tensor] | None, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """The online softmax: two partial results over disjoint keys, as one over both."""
    if state is None:
        return out_b, lse_b
    out, lse = state
    top = F.where(lse > lse_b, lse, lse_b)  # shift by the larger: exp() stays <= 1
    w, w_b = (lse - top).exp(), (lse_b - top).exp()
    return (out * w + out_b * w_b) / (w + w_b), top + (w + w_b).log()


def _block_backward(
    q: Tensor, k: Tensor, v: Tensor, dout: Tensor, lse: Tensor, delta: Tensor, seen: str
) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv of one block pair; the weights recomputed from the final ``lse`` as ``exp(scores - lse)``."""
    weights = (_scores(q, k, seen) - lse).exp()
    dv = weights.transpose(0, 1, 3, 2) @ dout
    dscores = weights * ((dout @ v.transpose(0, 1, 3, 2)) - delta) * (1.0 / math.sqrt(q.shape[-1]))
    return dscores @ k, dscores.transpose(0, 1, 3, 2) @ q, dv


def _block_shape(x: Any, chunks: Chunks) -> tuple[int, ...]:
    return (x.shape[0], x.shape[1], sum(length for _, length in chunks), x.shape[3])


class RingAttention(Function):
    """Ring attention on device arrays; ``layout`` holds every rank's chunks (see :func:`_layout`)."""

    @staticmethod
    def forward(ctx: Context, q: Any, k: Any, v: Any, comm: Communicator, causal: bool, layout: list) -> Any:
        n, rank = comm.size, comm.rank
        ctx.comm, ctx.causal, ctx.layout = comm, causal, layout
        with no_grad(), RingHops(comm, "forward", to=(rank + 1) % n, source=(rank - 1) % n) as hops:
            queries = list(zip([c for c, _ in layout[rank]], _pieces(q, layout[rank]), strict=True))
            states: list[Any] = [None] * len(queries)
            block = [k, v]
            for step in range(n):
                chunks = layout[(rank - step) % n]  # those of the rank whose k, v block is here
                if step < n - 1:  # the next block is on its way while this one is computed on
                    following = layout[(rank - step - 1) % n]
                    hop = hops.post("kv", step + 1, block, [_block_shape(k, following), _block_shape(v, following)])
                hops.note("compute", "block", step, block)
                k_pieces, v_pieces = _pieces(block[0], chunks), _pieces(block[1], chunks)
                for (k_chunk, _), k_piece, v_piece in zip(chunks, k_pieces, v_pieces, strict=True):
                    for i, (q_chunk, q_piece) in enumerate(queries):
                        seen = _visible(q_chunk, k_chunk, causal)
                        if seen:
                            states[i] = _merge(states[i], *_block_forward(q_piece, k_piece, v_piece, seen))
                hops.note("computed", "block", step, block)
                if step < n - 1:
                    block = hops.wait(hop)
            out = F.concat([o for o, _ in states], axis=2).data
            lse = F.concat([s for _, s in states], axis=2).data
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Context, dout: Any) -> tuple:
        q, k, v, out, lse = ctx.saved_tensors
        comm, layout, causal = ctx.comm, ctx.layout, ctx.causal
        n, rank, mine = comm.size, comm.rank, layout[comm.rank]
        with no_grad(), RingHops(comm, "backward", to=(rank - 1) % n, source=(rank + 1) % n) as hops:
            delta = (Tensor(dout) * Tensor(out)).sum(axis=-1, keepdims=True)  # sum_j P_ij dP_ij, per query row
            queries = list(zip([c for c, _ in mine], _pieces(q, mine), _pieces(dout, mine), strict=True))
            rows = list(zip(_pieces(lse, mine), _pieces(delta.data, mine), strict=True))
            dqs = [Tensor(memory.zeros(tuple(p.shape), q.dtype)) for _, p, _ in queries]
            block = [k, v]
            grads = [memory.zeros(tuple(k.shape), k.dtype), memory.zeros(tuple(v.shape), v.dtype)]  # my block's
            arriving = None  # the hop bringing the accumulators of the block computed on (mine start at zero)
            for step in range(n):
                chunks = layout[(rank + step) % n]  # the other way round: the dual of a send is a receive
                following = layout[(rank + step + 1) % n]  # after the last step: mine, whose gradients come home
                shapes = [_block_shape(k, following), _block_shape(v, following)]
                if step < n - 1:
                    kv_hop = hops.post("kv", step + 1, block, shapes)
                hops.note("compute", "block", step, block)
                k_pieces, v_pieces = _pieces(block[0], chunks), _pieces(block[1], chunks)
                parts: list[list[tuple[Tensor, Tensor]]] = [[] for _ in chunks]  # each key chunk's dk, dv, in order
                for j, (k_chunk, _) in enumerate(chunks):
                    for i, (q_chunk, q_piece, dout_piece) in enumerate(queries):
                        seen = _visible(q_chunk, k_chunk, causal)
                        if seen:
                            dq, dk, dv = _block_backward(q_piece, k_pieces[j], v_pieces[j], dout_piece, *rows[i], seen)
                            dqs[i] = dqs[i] + dq
                            parts[j].append((dk, dv))
                hops.note("computed", "block", step, block)
                # This block's dK, dV so far came from the rank it visited before, under the compute above; they
                # are summed into in the order one rank would, so the result does not depend on the ring.
                grads = grads if arriving is None else hops.wait(arriving)
                dks, dvs = _pieces(grads[0], chunks), _pieces(grads[1], chunks)
                for j, contributions in enumerate(parts):
                    for dk, dv in contributions:
                        dks[j], dvs[j] = dks[j] + dk, dvs[j] + dv
                grads = [F.concat(dks, axis=2).data, F.concat(dvs, axis=2).data]
                if n > 1:  # on to the rank this block visits next; after the last step, home
                    arriving = hops.post("grads", step + 1, grads, shapes, fresh=step == n - 1)
                if step < n - 1:
                    block = hops.wait(kv_hop)
            dk, dv = grads if arriving is None else hops.wait(arriving)
            dq = F.concat(dqs, axis=2).data
        return dq, dk, dv, None, None, None


def ring_attention(q: Tensor, k: Tensor, v: Tensor, comm: Communicator, causal: bool = False) -> Tensor:
    """This rank's rows of ``softmax(q k^T / sqrt(d)) v`` over the whole sequence, k and v passed round the ring.

    ``q``, ``k``, ``v`` (batch, heads, local_seq, head_dim) are this rank's block of the sequence. Without
    ``causal`` any split works (uneven included); with it, the zig-zag layout of :func:`zigzag_split`, which keeps
    the ranks' work equal, and at least two positions per rank. The local lengths are checked against the
    layout; which positions a rank holds cannot be, so the split is the caller's to get right. Collective: every
    rank calls it, and its backward.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn.attention import causal_mask, scaled_dot_product_attention
    >>> from nbcoll.parallel import ring_attention
    >>> comm = nbcoll.init()                       # one rank: its block is the whole sequence
    >>> q, k, v = (nbcoll.tensor(np.random.default_rng(s).standard_normal((1, 2, 6, 4))) for s in range(3))
    >>> out = ring_attention(q, k, v, comm, causal=True)
    >>> want, _ = scaled_dot_product_attention(q, k, v, causal_mask(6, 6))
    >>> out.shape, bool(np.allclose(out.numpy(), want.numpy()))
    ((1, 2, 6, 4), True)
    >>> comm.destroy()
    """
    _check_qkv(q, k, v, comm)
    return RingAttention.apply(q, k, v, comm, bool(causal), _layout(comm, q.shape[2], bool(causal)))


# -- Ulysses: two all-to-alls round ordinary attention ------------------------------------------------------------


def _sequence_to_heads(x: Tensor, comm: Communicator) -> Tensor:
    """(B, H, L/n, d) split over the sequence -> (B, H/n, L, d) split over the heads."""
    b, h, length, d = x.shape
    n = comm.size
    groups = x.reshape(b, n, h // n, length, d).transpose(1, 0, 2, 3, 4)  # head group g goes to rank g
    mine = all_to_all(groups, comm)  # block s: rank s's positions of my heads
    return mine.transpose(1, 2, 0, 3, 4).reshape(b, h // n, n * length, d)


def _heads_to_sequence(x: Tensor, comm: Communicator) -> Tensor:
    """(B, H/n, L, d) split over the heads -> (B, H, L/n, d) split over the sequence."""
    b, h, length, d = x.shape
    n = comm.size
    blocks = x.reshape(b, h, n, length // n, d).transpose(2, 0, 1, 3, 4)  # sequence block s goes to rank s
    mine = all_to_all(blocks, comm)  # block g: head group g at my positions
    return mine.transpose(1, 0, 2, 3, 4).reshape(b, n * h, length // n, d)


def ulysses_attention(q: Tensor, k: Tensor, v: Tensor, comm: Communicator, causal: bool = False) -> Tensor:
    """This rank's rows of full attention, by DeepSpeed-Ulysses: all-to-all to a head split, attend, and back.

    ``q``, ``k``, ``v`` (batch, heads, local_seq, head_dim) are this rank's contiguous block of the sequence (rank
    ``r`` holds positions ``[r L/n, (r+1) L/n)``). ``heads`` must divide by the ranks, and every rank must hold as
    many positions (nbcoll's all-to-all moves equal blocks: pad the sequence otherwise, or use
    :func:`ring_attention`). Differentiable through :func:`nbcoll.parallel.functional.all_to_all`.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn.attention import scaled_dot_product_attention
    >>> from nbcoll.parallel import ulysses_attention
    >>> comm = nbcoll.init()
    >>> q, k, v = (nbcoll.tensor(np.random.default_rng(s).standard_normal((1, 4, 6, 3))) for s in range(3))
    >>> out = ulysses_attention(q, k, v, comm)
    >>> bool(np.allclose(out.numpy(), scaled_dot_product_attention(q, k, v)[0].numpy()))
    True
    >>> comm.destroy()
    """
    _check_qkv(q, k, v, comm)
    heads = q.shape[1]
    if heads % comm.size:
        raise ValueError(f"heads: Ulysses gives each rank heads / ranks of them; {heads} do not split over {comm.size}")
    lengths = _local_lengths(comm, q.shape[2])
    if len(set(lengths)) != 1 or lengths[0] < 1:
        raise ValueError(
            f"q: Ulysses' all-to-all moves equal blocks: every rank needs the same local sequence length (>= 1), "
            f"got {lengths}; pad the sequence to a multiple of {comm.size}, or use ring_attention"
        )
    full_q, full_k, full_v = (_sequence_to_heads(x, comm) for x in (q, k, v))
    seq_len = full_q.shape[2]
    out, _ = scaled_dot_product_attention(full_q, full_k, full_v, causal_mask(seq_len, seq_len) if causal else None)
    return _heads_to_sequence(out, comm)


__all__ = [
    "RingAttention",
    "ring_attention",
    "ulysses_attention",
    "zigzag_merge",
    "zigzag_positions",
    "zigzag_split",
]
