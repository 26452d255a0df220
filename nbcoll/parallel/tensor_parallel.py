"""Tensor parallelism, Megatron style: each layer's matrices split across the ranks of one communicator.

Two linear layers in a row need one collective. The first is split by output rows (column parallel: each rank
computes a slice of the features), the second by input columns (row parallel: each rank multiplies its slice of
the features and the partial results are summed)::

    x (replicated) --f--> [x @ A_r^T] --act--> [h_r @ B_r^T] --g--> y = sum_r h_r @ B_r^T  (replicated)

Every rank computes the same loss from the replicated ``y``. Megatron's two conjugate functions carry the
gradients across the split:

    f   forward: identity            backward: all-reduce (each rank's x fed every rank's slice)
    g   forward: all-reduce          backward: identity   (every rank already holds the full dy)

Parameters outside the split (layer norms, the row-parallel bias) see identical inputs and gradients on every
rank, so they stay equal without communication. Each split layer names the dimension of each parameter that is
split in ``tp_split``; :func:`load_full_state` cuts a full model's state into the shards of this rank and
:func:`full_state_dict` puts the shards back together, so one process and ``n`` ranks start from, and can be
compared on, the same weights.

Example::

    comm = nbcoll.init()
    up = ColumnParallelLinear(16, 64, comm)        # this rank holds 64 / comm.size output features
    down = RowParallelLinear(64, 16, comm)         # and the matching 64 / comm.size input features
    y = down(up(x).gelu())                         # the full (.., 16) result on every rank
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

import nbcoll.functional as F
from nbcoll import memory
from nbcoll.nn import Module, Parameter, init
from nbcoll.nn.linear import parameter_dtype
from nbcoll.nn.shapes import check_input
from nbcoll.parallel.functional import _all_gather, _all_reduce
from nbcoll.tensors import Tensor, no_grad
from nbcoll.tensors.function import Context, Function

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


def divide(total: int, comm: Communicator, what: str) -> int:
    """``total / comm.size``, or a clear error naming ``what`` when the ranks cannot share it evenly."""
    if total % comm.size:
        raise ValueError(f"{what}: {total} is not divisible by the tensor-parallel size {comm.size}")
    return total // comm.size


# -- Megatron's f and g, and the gather of a split output ------------------------------------------------------


class CopyToRegion(Function):
    """Megatron's ``f``: ``y = x``; backward ``dx = sum over ranks of dy`` (each rank used x for its slice)."""

    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator) -> Any:
        ctx.comm = comm
        return x

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        return _all_reduce(ctx.comm, dy, "sum"), None


class ReduceFromRegion(Function):
    """Megatron's ``g``: ``y = sum over ranks of x``; backward ``dx = dy`` (the loss is the same on every rank)."""

    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator) -> Any:
        return _all_reduce(comm, x, "sum")

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        return dy, None


class GatherFromRegion(Function):
    """``y = the ranks' x stacked on dim 0``; backward keeps this rank's block of ``dy`` (the rest is theirs)."""

    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator) -> Any:
        ctx.comm, ctx.rows = comm, x.shape[0]
        return _all_gather(comm, x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        start = ctx.comm.rank * ctx.rows
        return dy[start : start + ctx.rows], None


def copy_to_region(x: Tensor, comm: Communicator) -> Tensor:
    return CopyToRegion.apply(x, comm)


def reduce_from_region(x: Tensor, comm: Communicator) -> Tensor:
    return ReduceFromRegion.apply(x, comm)


def gather_last_dim(x: Tensor, comm: Communicator) -> Tensor:
    """The ranks' slices of the last dimension concatenated in rank order, on every rank."""
    first = (x.ndim - 1,) + tuple(range(x.ndim - 1))  # the last axis in front: all-gather stacks along dim 0
    back = tuple(range(1, x.ndim)) + (0,)
    return GatherFromRegion.apply(x.transpose(*first), comm).transpose(*back)


# -- the split layers ------------------------------------------------------------------------------------------


class ColumnParallelLinear(Module):
    """``Linear(in_features, out_features)`` with its output features split: rank ``r`` holds rows ``r`` of ``n``.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel import ColumnParallelLinear
        >>> comm = nbcoll.init()                       # on 4 ranks: weight (3, 8), bias (3,)
        >>> layer = ColumnParallelLinear(8, 12, comm)
        >>> x = nbcoll.tensor(np.ones((2, 8), np.float32))
        >>> layer.weight.shape, layer(x).shape         # this rank's slice of the 12 features
        ((12, 8), (2, 12))
        >>> ColumnParallelLinear(8, 12, comm, gather_output=True)(x).shape     # all 12 on every rank
        (2, 12)
        >>> comm.destroy()

    ``copy_input=False`` leaves out ``f`` when the caller has applied it already (q, k and v share one input).
    """

    tp_split = {"weight": 0, "bias": 0}

    def __init__(
        self,
        in_features: int,
        out_features: int,
        comm: Communicator,
        bias: bool = True,
        gather_output: bool = False,
        copy_input: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.comm, self.gather_output, self.copy_input = comm, gather_output, copy_input
        self.in_features, self.out_features = in_features, out_features
        local = divide(out_features, comm, "out_features")
        dtype = parameter_dtype(dtype)
        bound = 1 / math.sqrt(in_features)  # Linear's initial range, from the full fan-in
        self.weight = init.uniform_(Parameter(np.zeros((local, in_features), dtype)), -bound, bound)
        self.bias = init.uniform_(Parameter(np.zeros(local, dtype)), -bound, bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (..., self.in_features), dtype=self.weight.dtype)
        if self.copy_input:
            x = copy_to_region(x, self.comm)
        y = x @ self.weight.T
        if self.bias is not None:
            y = y + self.bias
        return gather_last_dim(y, self.comm) if self.gather_output else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features} split over {self.comm.size}"


class RowParallelLinear(Module):
    """``Linear(in_features, out_features)`` with its input features split; the partial products are summed.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel import RowParallelLinear
        >>> comm = nbcoll.init()                       # on 4 ranks: weight (8, 3), bias (8,) replicated
        >>> layer = RowParallelLinear(12, 8, comm)
        >>> x_r = nbcoll.tensor(np.ones((2, 12 // comm.size), np.float32))     # this rank's features
        >>> layer.weight.shape, layer(x_r).shape        # the full output on every rank
        ((8, 12), (2, 8))
        >>> comm.destroy()

    The bias is added once, after the sum, and is the same on every rank.
    """

    tp_split = {"weight": 1}

    def __init__(
        self, in_features: int, out_features: int, comm: Communicator, bias: bool = True, dtype: Any = None
    ) -> None:
        super().__init__()
        self.comm, self.in_features, self.out_features = comm, in_features, out_features
        self.local_in = divide(in_features, comm, "in_features")
        dtype = parameter_dtype(dtype)
        bound = 1 / math.sqrt(in_features)
        self.weight = init.uniform_(Parameter(np.zeros((out_features, self.local_in), dtype)), -bound, bound)
        self.bias = init.uniform_(Parameter(np.zeros(out_features, dtype)), -bound, bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (..., self.local_in), dtype=self.weight.dtype)
        y = reduce_from_region(x @ self.weight.T, self.comm)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features} split over {self.comm.size}, out_features={self.out_features}"


class VocabParallelEmbedding(Module):
    """``Embedding(num_embeddings, dim)`` with the table's rows split: rank ``r`` holds ids ``[start, end)``.

    ``for each id: y = weight_r[id - start] if start <= id < end else 0``, then ``g`` sums over ranks: exactly
    one rank contributes each vector.

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
        self.local_rows = divide(num_embeddings, comm, "num_embeddings")
        self.start = comm.rank * self.local_rows
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
    local_logits: Tensor, targets: Any, comm: Communicator, ignore_index: int | None = None
) -> Tensor:
    """Mean cross-entropy of logits split over the vocabulary, without ever gathering the full logits.

    ``local_logits`` (.., V / n) are this rank's columns ``[rank * V / n, (rank + 1) * V / n)`` (the output of a
    ColumnParallelLinear head); ``targets`` (..) hold full-vocabulary ids, the same on every rank. Per row, with
    ``m`` the global max::

        loss = log(sum over ranks of sum_v exp(z_v - m)) - (z_target - m)

    Only per-row numbers cross the ranks: the max (no gradient), the sum of exponentials and the target's logit
    (through ``g``, whose identity backward gives each rank ``softmax - onehot`` on its own columns).

    A target outside ``[0, V)`` is a ``ValueError`` on every rank, before any collective: each rank knows ``V``
    (its slice times the rank count) and sees the same targets, so all of them refuse together. With
    ``ignore_index`` (off by default, as in Megatron, where a loss mask follows instead), rows whose target is
    that value count for nothing, not even in the mean's divisor, as in ``nn.CrossEntropyLoss``.

    Example::

        >>> import numpy as np, nbcoll, nbcoll.functional as F
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
        >>> comm.destroy()
    """
    per_rank = local_logits.shape[-1]
    logits = local_logits.reshape(-1, per_rank)
    targets = targets.numpy() if isinstance(targets, Tensor) else np.asarray(targets)
    if targets.size != logits.shape[0] or targets.dtype.kind not in "iu":
        raise ValueError(f"targets: expected {logits.shape[0]} integer ids, got {targets.dtype} {targets.shape}")
    keep = _check_vocab_targets(targets, per_rank * comm.size, ignore_index).reshape(-1)
    targets = targets.reshape(-1)
    with no_grad():  # the shift only keeps exp() finite; its gradient cancels
        row_max = logits.max(axis=-1).data
        global_max = memory.empty(tuple(row_max.shape), row_max.dtype)
        comm.all_reduce(row_max, global_max, op="max")
    shifted = logits - Tensor(global_max).reshape(-1, 1)
    sum_exp = reduce_from_region(shifted.exp().sum(axis=-1), comm)
    local_target = targets - comm.rank * per_rank
    mine = (local_target >= 0) & (local_target < per_rank) & keep
    picked = shifted.gather(Tensor(np.where(mine, local_target, 0).reshape(-1, 1)), axis=1).reshape(-1)
    target_logit = reduce_from_region(picked * Tensor(mine.astype(picked.dtype)), comm)
    loss = sum_exp.log() - target_logit
    if ignore_index is None:
        return loss.mean()
    kept = int(keep.sum())
    total = (loss * Tensor(keep.astype(loss.dtype))).sum()
    # No row counts: NaN as nn.CrossEntropyLoss gives, with zero gradients instead of 0 / 0's NaN.
    return total / kept if kept else total * 0.0 + float("nan")


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


# -- one process's weights <-> this rank's shards --------------------------------------------------------------


def _split_dims(model: Module) -> dict[str, int]:
    """``{parameter name: split dimension}`` for every split parameter of ``model``; the others are replicated."""
    dims = {}
    for prefix, module in model.named_modules():
        for name, dim in getattr(module, "tp_split", {}).items():
            if module._parameters.get(name) is not None:
                dims[f"{prefix}.{name}" if prefix else name] = dim
    return dims


def load_full_state(model: Module, full_state: dict[str, Any], comm: Communicator) -> Module:
    """Load a full model's ``state_dict()`` into the tensor-parallel ``model``: each split parameter gets this
    rank's block of the full array along its split dimension, every other one the full array. Returns ``model``."""
    dims = _split_dims(model)
    local = {}
    for name, value in full_state.items():
        value = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        local[name] = np.split(value, comm.size, axis=dims[name])[comm.rank] if name in dims else value
    model.load_state_dict(local)
    return model


def full_state_dict(model: Module, comm: Communicator) -> dict[str, np.ndarray]:
    """The full model's state, every split parameter all-gathered along its split dimension (host arrays)."""
    dims = _split_dims(model)
    state = {}
    for name, value in model.state_dict().items():
        value = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
        if name in dims:
            front = np.ascontiguousarray(np.moveaxis(value, dims[name], 0))
            gathered = memory.to_host(_all_gather(comm, memory.to_device(front)))
            value = np.moveaxis(gathered, 0, dims[name])
        state[name] = value
    return state


__all__ = [
    "ColumnParallelLinear",
    "CopyToRegion",
    "GatherFromRegion",
    "ReduceFromRegion",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "copy_to_region",
    "divide",
    "full_state_dict",
    "gather_last_dim",
    "load_full_state",
    "reduce_from_region",
    "vocab_parallel_cross_entropy",
]
