"""Gather, scatter-add and embedding lookup: moving values by an index array, and moving gradients back.

::

    y = gather(x, index, axis)             dx = scatter_add(zeros(x.shape), index, dy, axis)
    y = scatter_add(x, index, src, axis)   dx = dy             dsrc = pad(gather(dy, index, axis), src.shape)
    y = embedding(ids, weight)             dweight[ids[i]] += dy[i]   (repeated ids add up)

Example::

    picked = Gather.apply(log_probs, targets, 1)     # what log_probs.gather(targets, axis=1) does
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.kernels import concat as concat_kernels
from nbcoll.kernels import index as index_kernels
from nbcoll.tensors.function import Context, Function


class Gather(Function):
    """``y[i][j] = x[index[i][j]][j]`` for ``axis=0`` (torch.gather): y has index's shape."""

    @staticmethod
    def forward(ctx: Context, x: Any, index: Any, axis: int) -> Any:
        ctx.x_shape, ctx.axis = tuple(x.shape), axis
        ctx.save_for_backward(index)
        return index_kernels.gather(x, index, axis)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        (index,) = ctx.saved_tensors
        return index_kernels.scatter_add(memory.zeros(ctx.x_shape, dy.dtype), index, dy, ctx.axis), None, None


class ScatterAdd(Function):
    """``y = copy of x; y[index[i][j]][j] += src[i][j]`` for ``axis=0``."""

    @staticmethod
    def forward(ctx: Context, x: Any, index: Any, src: Any, axis: int) -> Any:
        ctx.axis, ctx.src_shape = axis, tuple(src.shape)
        ctx.save_for_backward(index)
        return index_kernels.scatter_add(x, index, src, axis)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, Any, None]:
        (index,) = ctx.saved_tensors
        dsrc = None
        if ctx.needs_input_grad[2]:
            # Only src's leading block of index's shape was added; the rest of src gets a zero gradient.
            dsrc = index_kernels.gather(dy, index, ctx.axis)
            if tuple(dsrc.shape) != ctx.src_shape:
                dsrc = concat_kernels.pad(dsrc, ctx.src_shape)
        return dy, None, dsrc, None


class Embedding(Function):
    """``y[i, :] = weight[ids[i], :]`` for ids of any shape; y has shape ``ids.shape + (dim,)``."""

    @staticmethod
    def forward(ctx: Context, ids: Any, weight: Any) -> Any:
        ctx.num_embeddings = weight.shape[0]
        ctx.save_for_backward(ids)
        return index_kernels.embedding(weight, ids)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[None, Any]:
        (ids,) = ctx.saved_tensors
        return None, index_kernels.embedding_backward(dy, ids, ctx.num_embeddings)
