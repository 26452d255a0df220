"""The vocabulary split across tensor-parallel ranks: the embedding table's rows, and a cross-entropy on split logits.

A vocabulary that does not divide by the rank count is padded, as Megatron pads it: ``padded_vocab_size`` rounds
it up to a multiple of ``divisible_by * tp`` and the extra rows sit at the end of the last ranks' slices. Padded
rows are never looked up; in the loss, ``vocab_size=V`` leaves the padded logits out of the softmax, so a padded
model computes exactly what the unpadded one-process model does (Megatron keeps them in, which only matters
while their weights are not zero)::

    rank:            0            1
    table rows:  [0 .. 3)    [3 .. 5) + 1 padded      V = 5, tp = 2, padded_vocab_size(5, 2) = 6

Example::

    comm = nbcoll.init()                                            # 2 ranks
    table = VocabParallelEmbedding(5, 16, comm)                     # 3 rows each, the last one padding
    head = ColumnParallelLinear(16, padded_vocab_size(5, comm.size), comm)
    loss = vocab_parallel_cross_entropy(head(h), targets, comm, vocab_size=5, label_smoothing=0.1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import nbcoll.functional as F
from nbcoll import memory
from nbcoll.nn import Module, Parameter, init
from nbcoll.nn.linear import parameter_dtype
from nbcoll.parallel.tensor_parallel import reduce_from_region
from nbcoll.tensors import Tensor, no_grad

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

REDUCTIONS = ("mean", "sum", "none")


def padded_vocab_size(vocab_size: int, tp_size: int, divisible_by: int = 1) -> int:
    """``vocab_size`` rounded up to a multiple of ``divisible_by * tp_size`` (Megatron's vocabulary padding).

    >>> from nbcoll.parallel.vocab_parallel import padded_vocab_size
    >>> padded_vocab_size(50257, 4), padded_vocab_size(50257, 4, divisible_by=128), padded_vocab_size(8, 4)
    (50260, 50688, 8)
    """
    for name, value in (("vocab_size", vocab_size), ("tp_size", tp_size), ("divisible_by", divisible_by)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    multiple = divisible_by * tp_size
    return -(-vocab_size // multiple) * multiple


class VocabParallelEmbedding(Module):
    """``Embedding(num_embeddings, dim)`` with the table's rows split: rank ``r`` holds ids ``[start, end)``.

    ``for each id: y = weight_r[id - start] if start <= id < end else 0``, then ``g`` sums over ranks: exactly
    one rank contributes each vector. A ``num_embeddings`` that does not divide by ``comm.size`` is padded to
    :func:`padded_vocab_size` rows (``tp_full`` records the real size, so that
    :func:`~nbcoll.parallel.tensor_parallel.load_full_state` pads and
    :func:`~nbcoll.parallel.tensor_parallel.full_state_dict` trims).

    Example::

        >>> import nbcoll
        >>> from nbcoll.parallel import VocabParallelEmbedding
        >>> comm = nbcoll.init()                       # on 4 ranks: weight (250, 64), ids 250r..250r+249
        >>> table = VocabParallelEmbedding(1000, 64, comm)
        >>> table.weight.shape, table(nbcoll.tensor([[1, 999]])).shape      # (N, L) -> (N, L, 64) on every rank
        ((1000, 64), (1, 2, 64))
        >>> comm.destroy()
    """

    tp_split = {"weight": 0}

    def __init__(self, num_embeddings: int, embedding_dim: int, comm: Communicator, dtype: Any = None) -> None:
        super().__init__()
        self.comm, self.num_embeddings, self.embedding_dim = comm, num_embeddings, embedding_dim
        padded = padded_vocab_size(num_embeddings, comm.size)
        self.local_rows = padded // comm.size
        self.start = comm.rank * self.local_rows
        self.tp_full = {"weight": num_embeddings} if padded != num_embeddings else {}  # no id reaches the padding
        self.weight = init.normal_(Parameter(np.zeros((self.local_rows, embedding_dim), parameter_dtype(dtype))))

    def forward(self, ids: Any) -> Tensor:
        ids = ids.numpy() if isinstance(ids, Tensor) else np.asarray(ids)
        if ids.dtype.kind not in "iu" or ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            raise ValueError(f"ids: expected integers in [0, {self.num_embeddings}), got {ids.dtype} values")
        local = ids - self.start
        mine = (local >= 0) & (local < self.local_rows)
        vectors = F.embedding(np.where(mine, local, 0), self.weight)
        vectors = vectors * Tensor(mine[..., None].astype(self.weight.dtype))
        return reduce_from_region(vectors, self.comm)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings} split over {self.comm.size}, {self.embedding_dim}"


def vocab_parallel_cross_entropy(
    local_logits: Tensor,
    targets: Any,
    comm: Communicator,
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    vocab_size: int | None = None,
) -> Tensor:
    """Cross-entropy of logits split over the vocabulary, without ever gathering the full logits.

    ``local_logits`` (.., V / n) are this rank's columns ``[rank * V / n, (rank + 1) * V / n)`` (the output of a
    ColumnParallelLinear head); ``targets`` (..) hold full-vocabulary ids, the same on every rank. Per row, with
    ``m`` the global max and ``lse = log(sum over ranks of sum_v exp(z_v - m))``::

        loss = (1 - eps) * (lse - (z_target - m)) + eps * (lse - mean_v (z_v - m))      eps = label_smoothing

    as ``nn.CrossEntropyLoss(label_smoothing=eps)`` computes it. Only per-row numbers cross the ranks: the max (no
    gradient), the sums of exponentials and of logits, and the target's logit (through ``g``, whose identity
    backward gives each rank its own columns' gradient).

    ``vocab_size`` (default: every column) is the real vocabulary: columns at or past it are padding
    (:func:`padded_vocab_size`) and count for nothing. A target outside ``[0, vocab_size)`` is a ``ValueError``
    on every rank, before any collective: each rank knows the size and sees the same targets. With
    ``ignore_index`` (off by default, as in Megatron, where a loss mask follows instead), rows whose target is
    that value count for nothing, not even in the mean's divisor, as in ``nn.CrossEntropyLoss``.
    ``reduction`` is ``"mean"``, ``"sum"`` or ``"none"`` (one loss per target, 0 where ignored).

    Example::

        >>> import numpy as np, nbcoll, nbcoll.functional as F
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import vocab_parallel_cross_entropy
        >>> comm = nbcoll.init()                       # one rank: its slice is the whole vocabulary
        >>> logits = nbcoll.tensor(np.array([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]], np.float32))
        >>> targets = nbcoll.tensor([0, 2])
        >>> loss = vocab_parallel_cross_entropy(logits, targets, comm)
        >>> bool(np.isclose(loss.item(), F.cross_entropy(logits, targets).item()))   # as on the full logits
        True
        >>> padded = vocab_parallel_cross_entropy(logits, nbcoll.tensor([0, -100]), comm, ignore_index=-100)
        >>> bool(np.isclose(padded.item(), F.cross_entropy(logits[:1], targets[:1]).item()))   # row 0 alone
        True
        >>> smooth = vocab_parallel_cross_entropy(logits, targets, comm, label_smoothing=0.1, reduction="none")
        >>> bool(np.allclose(smooth.numpy(), nn.CrossEntropyLoss(label_smoothing=0.1, reduction="none")(
        ...     logits, targets).numpy()))
        True
        >>> comm.destroy()
    """
    per_rank = local_logits.shape[-1]
    columns = per_rank * comm.size
    vocab = columns if vocab_size is None else vocab_size
    if isinstance(vocab, bool) or not isinstance(vocab, int) or not columns - per_rank < vocab <= columns:
        raise ValueError(
            f"vocab_size: expected an int in ({columns - per_rank}, {columns}] (the real vocabulary of "
            f"{comm.size} slices of {per_rank} columns, padding only in the last slice), got {vocab_size!r}"
        )
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"label_smoothing: expected a number in [0, 1], got {label_smoothing!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: expected one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    logits = local_logits.reshape(-1, per_rank)
    targets = targets.numpy() if isinstance(targets, Tensor) else np.asarray(targets)
    if targets.size != logits.shape[0] or targets.dtype.kind not in "iu":
        raise ValueError(f"targets: expected {logits.shape[0]} integer ids, got {targets.dtype} {targets.shape}")
    target_shape = targets.shape
    keep = _check_vocab_targets(targets, vocab, ignore_index).reshape(-1)
    targets = targets.reshape(-1)
    column = comm.rank * per_rank + np.arange(per_rank)
    real = Tensor((column < vocab).astype(logits.dtype))  # 0 on padded columns
    with no_grad():  # the shift only keeps exp() finite; its gradient cancels
        row_max = (logits + Tensor(np.where(column < vocab, 0.0, -np.inf).astype(logits.dtype))).max(axis=-1).data
        global_max = memory.empty(tuple(row_max.shape), row_max.dtype)
        comm.all_reduce(row_max, global_max, op="max")
    shifted = logits - Tensor(global_max).reshape(-1, 1)
    lse = reduce_from_region((shifted.exp() * real).sum(axis=-1), comm).log()
    local_target = targets - comm.rank * per_rank
    mine = (local_target >= 0) & (local_target < per_rank) & keep
    picked = shifted.gather(Tensor(np.where(mine, local_target, 0).reshape(-1, 1)), axis=1).reshape(-1)
    target_logit = reduce_from_region(picked * Tensor(mine.astype(picked.dtype)), comm)
    loss = lse - target_logit
    if label_smoothing:
        mean_logit = reduce_from_region((shifted * real).sum(axis=-1), comm) * (1.0 / vocab)
        loss = loss * (1.0 - label_smoothing) + (lse - mean_logit) * label_smoothing
    if ignore_index is not None:
        loss = loss * Tensor(keep.astype(loss.dtype))  # ignored rows: 0, and no gradient
    if reduction == "none":
        return loss.reshape(*target_shape)
    if reduction == "sum":
        return loss.sum()
    if ignore_index is None:
        return loss.mean()
    kept = int(keep.sum())
    # No row counts: NaN as nn.CrossEntropyLoss gives, with zero gradients instead of 0 / 0's NaN.
    return loss.sum() / kept if kept else loss.sum() * 0.0 + float("nan")


def _check_vocab_targets(targets: np.ndarray, vocab: int, ignore_index: int | None) -> np.ndarray:
    """Which targets count (all, or those not ``ignore_index``); a ``ValueError`` if one is not a class id."""
    keep = np.ones(targets.shape, bool) if ignore_index is None else targets != ignore_index
    bad = keep & ((targets < 0) | (targets >= vocab))
    if bad.any():
        at = tuple(int(p) for p in np.argwhere(bad)[0])
        ignoring = "no ignore_index" if ignore_index is None else f"ignore_index is {ignore_index}"
        raise ValueError(
            f"targets: expected class ids in [0, {vocab}) (the full vocabulary; {ignoring}), got {targets[at]} at "
            f"position {at} ({int(bad.sum())} bad target(s))"
        )
    return keep


__all__ = ["VocabParallelEmbedding", "padded_vocab_size", "vocab_parallel_cross_entropy"]
