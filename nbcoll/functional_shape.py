"""Function forms of the shape, joining, selection and indexing operations of Tensors.

They are importable from :mod:`nbcoll.functional` with the others, and are used from there::

    import nbcoll.functional as F
    rows = F.index_select(table, 0, ids)            # np.take(table, ids, axis=0), differentiable in table
    both = F.concat([a, b], axis=1)                  # the backward splits the gradient back

Example::

    >>> import nbcoll, nbcoll.functional as F
    >>> F.stack([nbcoll.tensor([1.0, 2.0]), nbcoll.tensor([3.0, 4.0])]).shape
    (2, 2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.tensors.ops import indexing, join, select
from nbcoll.tensors.tensor import Tensor, tensor


def reshape(x: Tensor, shape: Any) -> Tensor:
    """The same elements in a new shape; one dimension may be -1 (inferred).

    >>> import nbcoll, nbcoll.functional as F
    >>> F.reshape(nbcoll.tensor([1.0, 2.0, 3.0, 4.0]), (2, -1)).shape
    (2, 2)
    """
    return x.reshape(shape)


def transpose(x: Tensor, axes: Any = None) -> Tensor:
    """Reverse the axes (a matrix's transpose), or order them as ``axes`` says.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.transpose(nbcoll.tensor([[1.0, 2.0, 3.0]])).numpy()
    array([[1.],
           [2.],
           [3.]], dtype=float32)
    """
    return x.transpose() if axes is None else x.transpose(axes)


def permute(x: Tensor, axes: Any) -> Tensor:
    """NumPy's ``transpose(x, axes)`` under PyTorch's name: ``y.shape[k] == x.shape[axes[k]]``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.permute(nbcoll.tensor([[[1.0, 2.0, 3.0]]]), (2, 0, 1)).shape
    (3, 1, 1)
    """
    return x.permute(axes)


def concat(tensors: Any, axis: int = 0) -> Tensor:
    """``np.concatenate``: join tensors of one dtype along ``axis``; the backward splits the gradient back.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.concat([nbcoll.tensor([1.0]), nbcoll.tensor([2.0, 3.0])]).numpy()
    array([1., 2., 3.], dtype=float32)
    """
    return join.concat(tensors, axis)


def stack(tensors: Any, axis: int = 0) -> Tensor:
    """``np.stack``: join tensors of one shape along a new axis ``axis``.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.stack([nbcoll.tensor([1.0, 2.0]), nbcoll.tensor([3.0, 4.0])], axis=1).numpy()
    array([[1., 3.],
           [2., 4.]], dtype=float32)
    """
    return join.stack(tensors, axis)


def split(x: Tensor, sizes_or_sections: Any, axis: int = 0) -> tuple[Tensor, ...]:
    """Cut ``x`` along ``axis`` into a tuple of Tensors: a list gives their lengths, an int ``n`` makes ``n`` equal
    pieces (``np.split``'s rule). Each piece has its own gradient, which lands in its slice of ``x.grad``.

    >>> import nbcoll, nbcoll.functional as F
    >>> [piece.numpy() for piece in F.split(nbcoll.tensor([1.0, 2.0, 3.0]), [1, 2])]
    [array([1.], dtype=float32), array([2., 3.], dtype=float32)]
    """
    return join.split(x, sizes_or_sections, axis)


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] if cond[i] else b[i]``: ``cond`` a bool Tensor, ``a`` and ``b`` Tensors or numbers,
    all broadcasting together; the gradient goes to ``a`` where cond holds and to ``b`` elsewhere.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([-1.0, 2.0])
    >>> F.where(x > 0, x, 0.0).numpy()
    array([0., 2.], dtype=float32)
    """
    return select.where(cond, a, b)


def clip(x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
    """``for i: y[i] = min(max(x[i], lo), hi)`` with number bounds (None: no bound); gradient 1 inside
    ``[lo, hi]`` (bounds included, as PyTorch's clamp), 0 outside.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.clip(nbcoll.tensor([-2.0, 0.5, 3.0]), -1, 1).numpy()
    array([-1. ,  0.5,  1. ], dtype=float32)
    """
    return select.clip(x, lo, hi)


def masked_fill(x: Tensor, mask: Any, value: Any) -> Tensor:
    """``for i: y[i] = value if mask[i] else x[i]``: ``mask`` a bool Tensor that broadcasts to ``x``'s shape;
    no gradient flows to the filled positions.

    >>> import nbcoll, nbcoll.functional as F
    >>> scores = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> future = nbcoll.tensor([[False, True], [False, False]])
    >>> F.masked_fill(scores, future, -1e9).numpy()
    array([[ 1.e+00, -1.e+09],
           [ 3.e+00,  4.e+00]], dtype=float32)
    """
    return select.masked_fill(x, mask, value)


def gather(x: Tensor, index: Any, axis: int) -> Tensor:
    """``for i, j: y[i, j] = x[i, index[i, j]]`` along ``axis`` (here 1); ``index`` is shaped as ``x`` but on ``axis``.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    >>> F.gather(x, nbcoll.tensor([[2], [0]]), axis=1).numpy()
    array([[30.],
           [40.]], dtype=float32)
    """
    return x.gather(index, axis)


def scatter_add(x: Tensor, index: Any, src: Tensor, axis: int) -> Tensor:
    """``y = x.copy(); for i, j: y[i, index[i, j]] += src[i, j]`` along ``axis`` (here 1): repeated indices add up.

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[0.0, 0.0, 0.0]])
    >>> F.scatter_add(x, nbcoll.tensor([[0, 2, 0]]), nbcoll.tensor([[1.0, 2.0, 3.0]]), axis=1).numpy()
    array([[4., 0., 2.]], dtype=float32)
    """
    return x.scatter_add(index, src, axis)


def index_select(x: Tensor, axis: int, index: Any) -> Tensor:
    """``y = x.take(index, axis)``: whole slices of ``x`` along ``axis``, in the order of ``index`` (repeats allowed).

    >>> import nbcoll, nbcoll.functional as F
    >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> F.index_select(x, 0, nbcoll.tensor([2, 0, 2])).numpy()
    array([[5., 6.],
           [1., 2.],
           [5., 6.]], dtype=float32)
    """
    return x.index_select(axis, index)


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
    return indexing.Embedding.apply(ids, weight)
