"""Row lookups: ``index_select`` along any axis, and ``embedding`` with its backward.

::

    index_select(x, axis, index):    np.take(x, index, axis)
    embedding(weight, ids):          for r: out[r] = weight[ids[r]]
    embedding_backward(grad_out, ids, num_embeddings):  dweight = zeros;  for r: dweight[ids[r]] += grad_out[r]

A lookup is a gather of whole rows: every thread writes its own output element and only *reads* from the row
that ``ids`` names. Its backward is a scatter-add: rows that several ids name receive the sum of their
gradients through atomic adds, in a wider type for int8, uint8 and float16 (:mod:`nbcoll.kernels.widen`).

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import lookup
    >>> weight = nbcoll.to_device(np.arange(6, dtype=np.float32).reshape(3, 2))    # V=3 rows of D=2
    >>> ids = nbcoll.to_device(np.array([[2, 0, 2]]))                               # B=1, T=3
    >>> rows = lookup.embedding(weight, ids)                                        # (B, T, D)
    >>> nbcoll.to_host(rows)
    array([[[4., 5.],
            [0., 1.],
            [4., 5.]]], dtype=float32)
    >>> grad_rows = nbcoll.to_device(np.ones((1, 3, 2), np.float32))
    >>> nbcoll.to_host(lookup.embedding_backward(grad_rows, ids, 3))    # row 2 was used twice: its gradients sum
    array([[1., 1.],
           [0., 0.],
           [2., 2.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int64

from nbcoll import memory
from nbcoll.kernels import index_args
from nbcoll.kernels.copy import cast
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.index_args import check_indices, index_input, positive_axis
from nbcoll.kernels.indexing import flat_view, size_of
from nbcoll.kernels.registry import register
from nbcoll.kernels.widen import accumulate_dtype

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def index_select_reference(x: np.ndarray, axis: int, index: np.ndarray) -> np.ndarray:
    """``np.take(x, index, axis)``."""
    return np.take(x, index.astype(np.int64), axis=axis)


def embedding_reference(weight: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``out[r] = weight[ids[r]]`` for every position ``r`` of ``ids``."""
    return weight[ids.astype(np.int64)]


def embedding_backward_reference(grad_out: np.ndarray, ids: np.ndarray, num_embeddings: int) -> np.ndarray:
    """``dweight = zeros; dweight[ids[r]] += grad_out[r]``, duplicate ids summed."""
    dim = tuple(grad_out.shape)[-1]
    dweight = np.zeros((num_embeddings, dim), accumulate_dtype(grad_out.dtype))
    np.add.at(dweight, ids.reshape(-1).astype(np.int64), grad_out.reshape(-1, dim))
    return dweight.astype(grad_out.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels. Arrays arrive flattened to 1-D.


@register(
    "void(float32[::1], int64, int64[::1], int64, float32[::1])",
    "void(uint8[::1], int64, int32[::1], int64, uint8[::1])",
)
@cuda.jit
def index_select_kernel(x, axis_size, index, inner, out):
    # One thread copies one output element; x is seen as (outer, axis_size, inner), out as (outer, len(index),
    # inner), and negative indices count from the end as in NumPy.
    i = cuda.grid(1)
    if i < out.size:
        picked = index.size
        outer = i // (picked * inner)
        k = int64(index[(i // inner) % picked])
        if k < 0:
            k += axis_size
        out[i] = x[(outer * axis_size + k) * inner + i % inner]


@register(
    "void(float32[::1], int64[::1], int64, float32[::1])",
    "void(float16[::1], int32[::1], int64, float16[::1])",
)
@cuda.jit
def embedding_kernel(weight, ids, dim, out):
    # One thread copies one element of one looked-up row: out is (len(ids), dim), weight (rows, dim).
    i = cuda.grid(1)
    if i < out.size:
        out[i] = weight[int64(ids[i // dim]) * dim + i % dim]


@register(
    "void(float32[::1], int64[::1], int64, float32[::1])",
    "void(float16[::1], int32[::1], int64, float32[::1])",
    "void(int64[::1], uint8[::1], int64, int64[::1])",
)
@cuda.jit
def embedding_backward_kernel(grad_out, ids, dim, acc):
    # One thread adds one gradient element into the row its id names; repeated ids meet in the atomic add.
    i = cuda.grid(1)
    if i < grad_out.size:
        cuda.atomic.add(acc, int64(ids[i // dim]) * dim + i % dim, grad_out[i])


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def index_select(x: Any, axis: int, index: Any) -> Any:
    """``np.take(x, index, axis)`` for a 1-D ``index``; negative indices count from the end."""
    x, index = memory.contiguous_input(x, "x"), index_input(index, "index")
    if x.ndim == 0:
        raise ValueError("x: index_select needs at least one dimension, got a 0-d array")
    axis = positive_axis(axis, x.ndim)
    if index.ndim != 1:
        raise ValueError(f"index: must be 1-D, got shape {tuple(index.shape)}")
    check_indices(index, x.shape[axis], "index", allow_negative=True)
    return _index_select(x, axis, index)


@dispatch(reference=index_select_reference)
def _index_select(x: Any, axis: int, index: Any) -> Any:
    shape = tuple(x.shape[:axis]) + (index.size,) + tuple(x.shape[axis + 1 :])
    out = memory.empty(shape, x.dtype)
    inner = size_of(x.shape[axis + 1 :])
    index_args.launch(
        index_select_kernel, out.size, flat_view(x), x.shape[axis], flat_view(index), inner, flat_view(out)
    )
    return out


def embedding(weight: Any, ids: Any) -> Any:
    """``weight[ids]``: for every position of ``ids`` (any shape), the row of ``weight`` (V, D) it names."""
    weight, ids = memory.contiguous_input(weight, "weight"), index_input(ids, "ids")
    if weight.ndim != 2:
        raise ValueError(f"weight: expected shape (num_embeddings, dim), got {tuple(weight.shape)}")
    check_indices(ids, weight.shape[0], "ids")
    return _embedding(weight, ids)


@dispatch(reference=embedding_reference)
def _embedding(weight: Any, ids: Any) -> Any:
    dim = weight.shape[1]
    out = memory.empty(tuple(ids.shape) + (dim,), weight.dtype)
    index_args.launch(embedding_kernel, out.size, flat_view(weight), flat_view(ids), dim, flat_view(out))
    return out


def embedding_backward(grad_out: Any, ids: Any, num_embeddings: int) -> Any:
    """The gradient of :func:`embedding` for its weight: ``dweight[ids[r]] += grad_out[r]``, shape (V, D).

    Rows that appear several times in ``ids`` receive the sum of their gradients (atomic adds).
    """
    grad_out, ids = memory.contiguous_input(grad_out, "grad_out"), index_input(ids, "ids")
    grad_shape = tuple(grad_out.shape)
    if grad_out.ndim != ids.ndim + 1 or grad_shape[:-1] != tuple(ids.shape):
        raise ValueError(
            f"grad_out: expected shape ids.shape + (dim,) = {tuple(ids.shape)} + (dim,), got {tuple(grad_out.shape)}"
        )
    if int(num_embeddings) < 0:
        raise ValueError(f"num_embeddings: must be >= 0, got {num_embeddings}")
    check_indices(ids, int(num_embeddings), "ids")
    return _embedding_backward(grad_out, ids, int(num_embeddings))


@dispatch(reference=embedding_backward_reference)
def _embedding_backward(grad_out: Any, ids: Any, num_embeddings: int) -> Any:
    dim = tuple(grad_out.shape)[-1]
    acc = memory.zeros((num_embeddings, dim), accumulate_dtype(grad_out.dtype))
    index_args.launch(
        embedding_backward_kernel, grad_out.size, flat_view(grad_out), flat_view(ids), dim, flat_view(acc)
    )
    return acc if acc.dtype == grad_out.dtype else cast(acc, grad_out.dtype)
