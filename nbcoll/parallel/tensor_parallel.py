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
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
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


class ScatterToRegion(Function):
    """Megatron's scatter: keep this rank's block of the last dim of ``x``; backward all-gathers ``dy`` there."""

    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator) -> Any:
        width = x.shape[-1] // comm.size
        ctx.comm = comm
        return copy_kernels.contiguous(x[..., comm.rank * width : (comm.rank + 1) * width])

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        with no_grad():
            return gather_last_dim(Tensor(dy), ctx.comm).data, None


def copy_to_region(x: Tensor, comm: Communicator) -> Tensor:
    """Megatron's ``f`` on ``x``: the identity forward, an all-reduce of the gradient backward.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel import copy_to_region
    >>> comm = nbcoll.init()
    >>> copy_to_region(nbcoll.tensor(np.ones(3, np.float32)), comm).shape
    (3,)
    >>> comm.destroy()
    """
    return CopyToRegion.apply(x, comm)


def reduce_from_region(x: Tensor, comm: Communicator) -> Tensor:
    return ReduceFromRegion.apply(x, comm)


def scatter_last_dim(x: Tensor, comm: Communicator) -> Tensor:
    """This rank's slice of the last dimension of ``x`` (the same on every rank); the inverse of
    :func:`gather_last_dim`."""
    return ScatterToRegion.apply(x, comm)


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

    An ``out_features`` that does not divide by ``comm.size`` (a vocabulary) is padded at the end to a multiple
    of it, as Megatron pads its vocabulary: the padded features have zero weights and bias, a gathered output
    leaves them out, and :func:`load_full_state` / :func:`full_state_dict` pad and trim (``tp_full``).
    When several layers share one input (q, k and v), apply ``f`` once with :func:`copy_to_region` and call
    :meth:`local_forward` on each.
    """

    tp_split = {"weight": 0, "bias": 0}

    def __init__(
        self,
        in_features: int,
        out_features: int,
        comm: Communicator,
        bias: bool = True,
        gather_output: bool = False,
        copy_input: bool | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if copy_input is not None:
            warnings.warn(
                "ColumnParallelLinear(copy_input=) is deprecated: apply copy_to_region once and call local_forward",
                DeprecationWarning,
                stacklevel=2,
            )
        self.comm, self.gather_output = comm, gather_output
        self.copy_input = True if copy_input is None else copy_input
        self.in_features, self.out_features = in_features, out_features
        local = -(-out_features // comm.size)  # rounded up: the last ranks' slices end with padding
        real = max(0, min(local, out_features - comm.rank * local))
        self.tp_full = {"weight": out_features, "bias": out_features} if local * comm.size != out_features else {}
        dtype = parameter_dtype(dtype)
        bound = 1 / math.sqrt(in_features)  # Linear's initial range, from the full fan-in
        keep = (np.arange(local) < real).astype(dtype)  # 0 on padded features
        weight = init.uniform_(Parameter(np.zeros((local, in_features), dtype)), -bound, bound)
        self.weight = Parameter(weight.numpy() * keep[:, None]) if real < local else weight
        if bias:
            b = init.uniform_(Parameter(np.zeros(local, dtype)), -bound, bound)
            self.bias = Parameter(b.numpy() * keep) if real < local else b
        else:
            self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (..., self.in_features), dtype=self.weight.dtype)
        if self.copy_input:
            x = copy_to_region(x, self.comm)
        y = self.local_forward(x)
        if not self.gather_output:
            return y
        y = gather_last_dim(y, self.comm)
        return y[..., : self.out_features] if self.tp_full else y

    def local_forward(self, x: Tensor) -> Tensor:
        """``x @ W_r^T + b_r``: this rank's features, for an input already in the region (``f`` applied).

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel import ColumnParallelLinear, copy_to_region
        >>> comm = nbcoll.init()
        >>> q, k = ColumnParallelLinear(4, 6, comm), ColumnParallelLinear(4, 6, comm)
        >>> x = copy_to_region(nbcoll.tensor(np.ones((2, 4), np.float32)), comm)   # f once, for both
        >>> q.local_forward(x).shape, k.local_forward(x).shape
        ((2, 6), (2, 6))
        >>> comm.destroy()
        """
        x = check_input(self, x, (..., self.in_features), dtype=self.weight.dtype)
        y = x @ self.weight.T
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features} split over {self.comm.size}"


class RowParallelLinear(Module):
    """``Linear(in_features, out_features)`` with its input features split; the partial products are summed.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel import RowParallelLinear
        >>> comm = nbcoll.init()                       # on 4 ranks: weight (8, 3), bias (8,) replicated
        >>> layer = RowParallelLinear(12, 8, comm, input_is_parallel=True)
        >>> x_r = nbcoll.tensor(np.ones((2, 12 // comm.size), np.float32))     # this rank's features
        >>> layer.weight.shape, layer(x_r).shape        # the full output on every rank
        ((8, 12), (2, 8))
        >>> RowParallelLinear(12, 8, comm)(nbcoll.tensor(np.ones((2, 12), np.float32))).shape   # a full input
        (2, 8)
        >>> comm.destroy()

    As in Megatron, ``input_is_parallel=False`` (the default) takes the full input and keeps this rank's slice
    of its features (their gradient is all-gathered back); ``True`` takes the slice itself, as a
    :class:`ColumnParallelLinear` without ``gather_output`` produces it. The bias is added once, after the sum,
    and is the same on every rank.
    """

    tp_split = {"weight": 1}

    def __init__(
        self,
        in_features: int,
        out_features: int,
        comm: Communicator,
        bias: bool = True,
        input_is_parallel: bool = False,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.comm, self.in_features, self.out_features = comm, in_features, out_features
        self.input_is_parallel = input_is_parallel
        self.local_in = divide(in_features, comm, "in_features")
        dtype = parameter_dtype(dtype)
        bound = 1 / math.sqrt(in_features)
        self.weight = init.uniform_(Parameter(np.zeros((out_features, self.local_in), dtype)), -bound, bound)
        self.bias = init.uniform_(Parameter(np.zeros(out_features, dtype)), -bound, bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if not self.input_is_parallel:
            x = scatter_last_dim(check_input(self, x, (..., self.in_features), dtype=self.weight.dtype), self.comm)
        x = check_input(self, x, (..., self.local_in), dtype=self.weight.dtype)
        y = reduce_from_region(x @ self.weight.T, self.comm)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features} split over {self.comm.size}, out_features={self.out_features}"


# -- one process's weights <-> this rank's shards --------------------------------------------------------------


def _split_dims(model: Module) -> dict[str, int]:
    """``{parameter name: split dimension}`` for every split parameter of ``model``; the others are replicated."""
    dims = {}
    for prefix, module in model.named_modules():
        for name, dim in getattr(module, "tp_split", {}).items():
            if module._parameters.get(name) is not None:
                dims[f"{prefix}.{name}" if prefix else name] = dim
    return dims


def _padded_sizes(model: Module) -> dict[str, int]:
    """``{parameter name: real size along its split dimension}`` for the split parameters that carry padding."""
    sizes = {}
    for prefix, module in model.named_modules():
        for name, size in getattr(module, "tp_full", {}).items():
            sizes[f"{prefix}.{name}" if prefix else name] = size
    return sizes


def load_full_state(model: Module, full_state: dict[str, Any], comm: Communicator) -> Module:
    """Load a full model's ``state_dict()`` into the tensor-parallel ``model``: each split parameter gets this
    rank's block of the full array along its split dimension (zero-padded at the end first where the layer pads,
    a vocabulary), every other one the full array. Returns ``model``.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import ColumnParallelLinear, load_full_state
    >>> comm = nbcoll.init()                       # on 2 ranks: rows 0-2 of the full weight, then 3-5
    >>> full = nn.Linear(4, 6)
    >>> split = load_full_state(ColumnParallelLinear(4, 6, comm), full.state_dict(), comm)
    >>> split.weight.shape
    (6, 4)
    >>> comm.destroy()
    """
    dims, padded = _split_dims(model), _padded_sizes(model)
    own = model.state_dict()
    local = {}
    for name, value in full_state.items():
        value = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        if name in padded and name in own:
            width = [(0, 0)] * value.ndim
            width[dims[name]] = (0, own[name].shape[dims[name]] * comm.size - value.shape[dims[name]])
            value = np.pad(value, width)
        local[name] = np.split(value, comm.size, axis=dims[name])[comm.rank] if name in dims else value
    model.load_state_dict(local)
    return model


def full_state_dict(model: Module, comm: Communicator) -> dict[str, np.ndarray]:
    """The full model's state, every split parameter all-gathered along its split dimension, padding trimmed
    (host arrays).

    >>> import nbcoll
    >>> from nbcoll.parallel import ColumnParallelLinear, full_state_dict
    >>> comm = nbcoll.init()
    >>> {k: v.shape for k, v in full_state_dict(ColumnParallelLinear(4, 5, comm), comm).items()}
    {'weight': (5, 4), 'bias': (5,)}
    >>> comm.destroy()
    """
    dims, padded = _split_dims(model), _padded_sizes(model)
    state = {}
    for name, value in model.state_dict().items():
        value = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
        if name in dims:
            front = np.ascontiguousarray(np.moveaxis(value, dims[name], 0))
            gathered = memory.to_host(_all_gather(comm, memory.to_device(front)))
            value = np.moveaxis(gathered[: padded.get(name, len(gathered))], 0, dims[name])
        state[name] = value
    return state


__all__ = [
    "ColumnParallelLinear",
    "CopyToRegion",
    "GatherFromRegion",
    "ReduceFromRegion",
    "RowParallelLinear",
    "ScatterToRegion",
    "copy_to_region",
    "divide",
    "full_state_dict",
    "gather_last_dim",
    "load_full_state",
    "reduce_from_region",
    "scatter_last_dim",
]
