"""Operations that move elements without changing them: reshape, permute and index_select.

Their backward moves the gradient back the same way::

    y = x.reshape(s)            dx = dy.reshape(x.shape)
    y = x.transpose(axes)       dx = dy.transpose(inverse of axes)
    y = index_select(x, d, i)   dx = zeros(x.shape), then dx[.., i[j], ..] += dy[.., j, ..]   (along axis d)

Indexing, ``x[key]``, is made of them (:mod:`nbcoll.tensors.ops.getitem`).

Example::

    y = IndexSelect.apply(x, 1, index)      # what x.index_select(1, index) does
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import index as index_kernels
from nbcoll.kernels.elementwise import binary, where
from nbcoll.kernels.transpose import permute
from nbcoll.tensors.arrays import broadcast_to, scalar
from nbcoll.tensors.function import Context, Function


def resolve_shape(shape: tuple[int, ...], size: int) -> tuple[int, ...]:
    """``shape`` with its one ``-1`` replaced by what makes the sizes match; a ``ValueError`` if nothing does."""
    shape = tuple(int(n) for n in shape)
    known = 1
    for n in shape:
        if n != -1:
            known *= n
    unknown = [d for d, n in enumerate(shape) if n == -1]
    if len(unknown) > 1:
        raise ValueError(f"reshape: can only specify one unknown dimension (-1), got {shape}")
    if unknown and known and size % known == 0:
        shape = tuple(size // known if n == -1 else n for n in shape)
    if -1 in shape or any(n < 0 for n in shape) or int(np.prod(shape)) != size:
        raise ValueError(f"reshape: cannot reshape an array of size {size} into shape {shape}")
    return shape


class Reshape(Function):
    """``y`` has the same elements as ``x``, in the same row-major order, under a new shape."""

    @staticmethod
    def forward(ctx: Context, x: Any, shape: tuple[int, ...]) -> Any:
        ctx.x_shape = tuple(x.shape)
        return x.reshape(resolve_shape(shape, x.size))

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        return dy.reshape(ctx.x_shape), None


def check_permutation(axes: Any, ndim: int) -> tuple[int, ...]:
    """``axes`` (negatives allowed) as non-negative ints, if they are a permutation of ``range(ndim)``; as NumPy,
    an axis out of ``[-ndim, ndim)`` or a repeated or missing axis raises ``ValueError``."""
    axes = tuple(axes)
    for a in axes:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool) or not -ndim <= a < ndim:
            raise ValueError(f"transpose: axis {a!r} is out of range for a tensor of {ndim} dimensions")
    normalized = tuple(int(a) % ndim for a in axes)
    if sorted(normalized) != list(range(ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of the {ndim} axes")
    return normalized


class Permute(Function):
    """``y[i_axes[0], i_axes[1], ...] = x[i0, i1, ...]``: NumPy ``transpose(axes)``, as a contiguous copy."""

    @staticmethod
    def forward(ctx: Context, x: Any, axes: tuple[int, ...]) -> Any:
        ctx.axes = check_permutation(axes, x.ndim)
        return permute(x, ctx.axes)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        inverse = tuple(int(a) for a in np.argsort(ctx.axes))
        return permute(dy, inverse), None


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
