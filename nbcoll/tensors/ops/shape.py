"""Operations that move elements without changing them: reshape, permute, index_select and basic indexing.

Their backward moves the gradient back the same way::

    y = x.reshape(s)            dx = dy.reshape(x.shape)
    y = x.transpose(axes)       dx = dy.transpose(inverse of axes)
    y = index_select(x, d, i)   dx = zeros(x.shape), then dx[.., i[j], ..] += dy[.., j, ..]   (along axis d)
    y = x[1, 2:5]               one index_select per indexed axis, then a reshape that drops integer axes

Example::

    y = getitem(x, (slice(None), 2))        # what x[:, 2] does
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import index as index_kernels
from nbcoll.kernels.elementwise import binary, where
from nbcoll.kernels.transpose import permute
from nbcoll.tensors.arrays import broadcast_to, from_host, scalar
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


def _expand_key(key: Any, ndim: int) -> list[Any]:
    """The key as a list with one entry per axis of x, plus the ``None`` entries that insert new axes."""
    key = list(key) if isinstance(key, tuple) else [key]
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(k is not None and k is not Ellipsis for k in key)
    if used > ndim:
        raise IndexError(f"too many indices: {used} given for a tensor of {ndim} dimensions")
    fill = [slice(None)] * (ndim - used)
    if Ellipsis in key:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        return key[:at] + fill + key[at + 1 :]
    return key + fill


def getitem(x: Any, key: Any) -> Any:
    """Basic indexing of a Tensor by integers, slices, ``...`` and ``None``; the result is a new Tensor."""
    out_shape: list[int] = []
    y, axis = x, 0
    for k in _expand_key(key, x.ndim):
        if k is None:
            out_shape.append(1)
            continue
        size = x.shape[axis]
        if isinstance(k, slice):
            positions = range(*k.indices(size))
            out_shape.append(len(positions))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            if not -size <= int(k) < size:
                raise IndexError(f"index {int(k)} is out of bounds for axis {axis} with size {size}")
            positions = range(int(k) % size, int(k) % size + 1)
        else:
            raise TypeError(
                f"index: only integers, slices, '...' and None are supported (basic indexing), got {k!r}; "
                "use index_select or gather to pick elements by an index array"
            )
        if positions != range(size):
            index = from_host(np.array(positions, dtype=np.int64))
            y = IndexSelect.apply(y, axis, index, unique=True)
        axis += 1
    return Reshape.apply(y, tuple(out_shape))
