"""Moving values by an index array, and gradients back: index_select, gather, scatter-add and embedding lookup.

::

    y = index_select(x, d, i)              dx = zeros(x.shape), then dx[.., i[j], ..] += dy[.., j, ..]  (axis d)
    y = gather(x, index, axis)             dx = scatter_add(zeros(x.shape), index, dy, axis)
    y = scatter_add(x, index, src, axis)   dx = dy             dsrc = pad(gather(dy, index, axis), src.shape)
    y = embedding(ids, weight)             dweight[ids[i]] += dy[i]   (repeated ids add up)

The kernels are :mod:`nbcoll.kernels.index`'s (and :mod:`nbcoll.kernels.concat`'s ``pad``,
:mod:`nbcoll.kernels.elementwise`'s ``where`` for negative indices). :func:`index_select`,
:func:`gather` and :func:`scatter_add` are both the Tensor methods and the ``F.*`` forms; :func:`embedding` is
``F.embedding``.

Example::

    >>> import nbcoll
    >>> log_probs = nbcoll.tensor([[-0.1, -2.0], [-3.0, -0.2]])
    >>> index = nbcoll.tensor([[0], [1]])
    >>> Gather.apply(log_probs, index.data, 1).numpy()     # what log_probs.gather(index, axis=1) does
    array([[-0.1],
           [-0.2]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import concat as concat_kernels
from nbcoll.kernels import index as index_kernels
from nbcoll.kernels.elementwise import binary, where
from nbcoll.tensors.arrays import broadcast_to, from_host, scalar
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor, tensor


class IndexSelect(Function):
    """``y = np.take(x, index, axis)`` for a 1-D integer ``index``.

    ``unique=True`` promises that no index repeats and none is negative (true of slices), so backward can
    scatter without atomics.
    """

    @staticmethod
    def forward(ctx: Context, x: Any, axis: int, index: Any, unique: bool = False) -> Any:
        ctx.x_shape, ctx.axis, ctx.unique = tuple(x.shape), int(axis) % x.ndim, unique
        ctx.save_for_backward(index)
        return index_kernels.index_select(x, ctx.axis, index)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None]:
        (index,) = ctx.saved_tensors
        if not ctx.unique:
            # NumPy's take counts negative indices from the end; scatter_add wants them in [0, size).
            size = ctx.x_shape[ctx.axis]
            negative = binary("lt", index, scalar(0, index.dtype))
            index = where(negative, binary("add", index, scalar(size, index.dtype)), index)
        # gather/scatter want an index of dy's shape: repeat the 1-D index along every other axis.
        along_axis = tuple(index.size if d == ctx.axis else 1 for d in range(len(ctx.x_shape)))
        full_index = broadcast_to(index.reshape(along_axis), tuple(dy.shape))
        zeros = memory.zeros(ctx.x_shape, dy.dtype)
        scatter = index_kernels.scatter if ctx.unique else index_kernels.scatter_add
        return scatter(zeros, full_index, dy, ctx.axis), None, None


def _index_array(index: Any) -> Any:
    """An index argument (Tensor, device array, NumPy array or list of ints) as a device array."""
    if isinstance(index, Tensor):
        return index.data
    if memory.is_device_array(index):
        return index
    host = np.asarray(index)
    if host.dtype.kind not in "iu":
        raise TypeError(f"index: expected integers, got dtype {host.dtype}")
    return from_host(host)


def index_select(x: Tensor, axis: int, index: Any) -> Tensor:
    """``y = np.take(x, index, axis)`` for a 1-D integer index: whole slices of ``x`` along ``axis``, in the order
    of ``index`` (repeats allowed); ``x.index_select(axis, index)`` or ``F.index_select(x, axis, index)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> F.index_select(x, 0, nbcoll.tensor([2, 0, 2])).numpy()
    array([[5., 6.],
           [1., 2.],
           [5., 6.]], dtype=float32)
    >>> x.index_select(1, [1, 1, 0]).numpy()
    array([[2., 2., 1.],
           [4., 4., 3.],
           [6., 6., 5.]], dtype=float32)
    """
    return IndexSelect.apply(x, axis, _index_array(index))


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


def gather(x: Tensor, index: Any, axis: int) -> Tensor:
    """``for i, j: y[i, j] = x[i, index[i, j]]`` along ``axis`` (here 1), as torch.gather: ``y`` has index's
    shape; ``x.gather(index, axis)`` or ``F.gather(x, index, axis)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    >>> F.gather(x, nbcoll.tensor([[2], [0]]), axis=1).numpy()
    array([[30.],
           [40.]], dtype=float32)
    >>> x.gather(nbcoll.tensor([[1, 0, 1]]), axis=0).numpy()        # y[0][j] = x[index[0][j]][j]
    array([[40., 20., 60.]], dtype=float32)
    """
    return Gather.apply(x, _index_array(index), axis)


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


def scatter_add(x: Tensor, index: Any, src: Tensor, axis: int) -> Tensor:
    """``y = x.copy(); for i, j: y[i, index[i, j]] += src[i, j]`` along ``axis`` (here 1): repeated indices add
    up; ``x.scatter_add(index, src, axis)`` or ``F.scatter_add(x, index, src, axis)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[0.0, 0.0, 0.0]])
    >>> F.scatter_add(x, nbcoll.tensor([[0, 2, 0]]), nbcoll.tensor([[1.0, 2.0, 3.0]]), axis=1).numpy()
    array([[4., 0., 2.]], dtype=float32)
    """
    return ScatterAdd.apply(x, _index_array(index), x._operand(src), axis)


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


def embedding(ids: Any, weight: Tensor) -> Tensor:
    """``weight[ids]``: the row of ``weight`` (num_embeddings, dim) for every id; ids may have any shape.

    >>> import numpy as np, nbcoll, nbcoll.functional as F
    >>> weight = nbcoll.tensor(np.arange(6.0).reshape(3, 2))
    >>> F.embedding([[2, 0]], weight).numpy()
    array([[[4., 5.],
            [0., 1.]]])
    """
    ids = ids if isinstance(ids, Tensor) else tensor(np.asarray(ids))
    if ids.dtype.kind not in "iu":
        raise TypeError(f"ids: expected an integer dtype, got {ids.dtype}")
    return Embedding.apply(ids, weight)


# The Tensor methods of this module (x.gather(index, axis) is gather(x, index, axis)).
Tensor.index_select, Tensor.gather, Tensor.scatter_add = index_select, gather, scatter_add
