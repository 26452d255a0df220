"""Joining tensors along an axis and cutting one apart: concat, stack, split, and the gradients that undo them.

::

    y = concat([a, b], axis)        da, db = split(dy, [a.shape[axis], b.shape[axis]], axis)
    y = stack([a, b], axis)         concat of a and b, each given a new axis of length 1 at ``axis``
    p = narrow(x, axis, s, n)       dx = zeros(x.shape);  dx[..., s : s + n, ...] = dp
    a, b = split(x, [n, m], axis)   one narrow per piece, so each piece is a Tensor with its own gradient

Each piece's backward pads its gradient to x's whole shape, so splitting into n pieces costs n copies of x's
size in backward: cheap for the few pieces of q, k, v or of an LSTM's gates.

The kernels are :mod:`nbcoll.kernels.concat`'s. After the Functions come :func:`concat` and :func:`stack`
(``F.concat``, ``F.stack``) and :func:`split`, both ``x.split`` and ``F.split``.

Example::

    >>> import nbcoll, nbcoll.functional as F
    >>> qkv = nbcoll.tensor([[1.0, 2.0, 3.0]])
    >>> q, k, v = F.split(qkv, 3, axis=-1)              # three equal pieces
    >>> F.concat([q, v], axis=-1).numpy()
    array([[1., 3.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nbcoll.kernels import concat as concat_kernels
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


class Concat(Function):
    """``y = concat(xs, axis)``: ``for k, i: y[..., start_k + i, ...] = xs[k][..., i, ...]``"""

    @staticmethod
    def forward(ctx: Context, axis: int, *xs: Any) -> Any:
        ctx.axis, ctx.sizes = axis, [int(x.shape[axis]) for x in xs]
        return concat_kernels.concat(list(xs), axis)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, ...]:
        pieces = concat_kernels.split(dy, ctx.sizes, ctx.axis)
        return (None, *(p if needed else None for p, needed in zip(pieces, ctx.needs_input_grad[1:], strict=True)))


class Narrow(Function):
    """``for i: y[..., i, ...] = x[..., start + i, ...]`` for ``i < length`` along ``axis``"""

    @staticmethod
    def forward(ctx: Context, x: Any, axis: int, start: int, length: int) -> Any:
        ctx.x_shape, ctx.axis, ctx.start = tuple(x.shape), axis, start
        return concat_kernels.narrow(x, axis, start, length)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None, None, None]:
        return concat_kernels.pad(dy, ctx.x_shape, ctx.axis, ctx.start), None, None, None


def _axis(axis: Any, ndim: int, arg: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise ValueError(f"{arg}: expected an int in [{-ndim}, {ndim}) for {ndim}-d tensors, got {axis!r}")
    return int(axis) % ndim


def _check_tensors(tensors: Any, name: str) -> list[Tensor]:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{name}: expected a non-empty list or tuple of Tensors, got {tensors!r}")
    for k, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: tensors[{k}] is a {type(t).__name__}, expected a Tensor")
        if t.dtype != tensors[0].dtype:
            raise TypeError(f"{name}: tensors[{k}].dtype is {t.dtype}, expected tensors[0].dtype {tensors[0].dtype}")
    return list(tensors)


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """``np.concatenate`` (``F.concat``): join tensors of one dtype and ndim (>= 1) along ``axis``; their other
    dimensions must be equal. The backward splits the gradient back.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.concat([nbcoll.tensor([1.0]), nbcoll.tensor([2.0, 3.0])]).numpy()
    array([1., 2., 3.], dtype=float32)
    """
    tensors = _check_tensors(tensors, "concat")
    if tensors[0].ndim == 0:
        raise ValueError("concat: 0-d tensors cannot be concatenated; use stack")
    axis = _axis(axis, tensors[0].ndim)
    for k, t in enumerate(tensors):
        same = t.ndim == tensors[0].ndim and all(t.shape[d] == tensors[0].shape[d] for d in range(t.ndim) if d != axis)
        if not same:
            raise ValueError(
                f"concat: tensors[{k}].shape {t.shape} must equal tensors[0].shape {tensors[0].shape} "
                f"on every axis except {axis}"
            )
    return Concat.apply(axis, *tensors)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """``np.stack`` (``F.stack``): join tensors of one shape along a new axis ``axis`` (``-1`` is a new last axis).

    >>> import nbcoll, nbcoll.functional as F
    >>> F.stack([nbcoll.tensor([1.0, 2.0]), nbcoll.tensor([3.0, 4.0])], axis=1).numpy()
    array([[1., 3.],
           [2., 4.]], dtype=float32)
    """
    tensors = _check_tensors(tensors, "stack")
    shape = tensors[0].shape
    for k, t in enumerate(tensors):
        if t.shape != shape:
            raise ValueError(f"stack: tensors[{k}].shape {t.shape} must equal tensors[0].shape {shape}")
    axis = _axis(axis, len(shape) + 1)
    with_axis = shape[:axis] + (1,) + shape[axis:]
    return concat([t.reshape(with_axis) for t in tensors], axis)


def split(x: Tensor, sizes_or_sections: int | Sequence[int], axis: int = 0) -> tuple[Tensor, ...]:
    """Cut ``x`` along ``axis`` into a tuple of Tensors: a list gives the pieces' lengths (adding up to
    ``x.shape[axis]``), an int ``n`` cuts it into ``n`` pieces of equal length (which must divide it, as
    ``np.split`` requires). Each piece has its own gradient, which lands in its slice of ``x.grad``.
    ``x.split(...)`` or ``F.split(x, ...)``.

    >>> import nbcoll, nbcoll.functional as F
    >>> [piece.numpy() for piece in F.split(nbcoll.tensor([1.0, 2.0, 3.0]), [1, 2])]
    [array([1.], dtype=float32), array([2., 3.], dtype=float32)]
    >>> [piece.tolist() for piece in nbcoll.tensor([1.0, 2.0, 3.0, 4.0]).split(2)]
    [[1.0, 2.0], [3.0, 4.0]]
    """
    if x.ndim == 0:
        raise ValueError("split: a 0-d tensor cannot be split")
    axis = _axis(axis, x.ndim)
    length = x.shape[axis]
    if isinstance(sizes_or_sections, (int, np.integer)) and not isinstance(sizes_or_sections, bool):
        sections = int(sizes_or_sections)
        if sections <= 0 or length % sections:
            raise ValueError(
                f"sizes_or_sections: {sections} equal pieces do not divide x.shape[{axis}]={length}; "
                "give a list of lengths instead"
            )
        sizes = [length // sections] * sections
    else:
        sizes = [int(s) for s in sizes_or_sections]
        if not sizes or any(s < 0 for s in sizes) or sum(sizes) != length:
            raise ValueError(
                f"sizes_or_sections: expected non-negative lengths adding up to x.shape[{axis}]={length}, got {sizes}"
            )
    pieces, start = [], 0
    for size in sizes:
        pieces.append(Narrow.apply(x, axis, start, size))
        start += size
    return tuple(pieces)


Tensor.split = split
