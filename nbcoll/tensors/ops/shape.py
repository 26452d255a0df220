"""Views of the same elements in another shape or axis order: reshape, flatten, transpose, permute and ``.T``.

Their backward moves the gradient back the same way::

    y = x.reshape(s)            dx = dy.reshape(x.shape)
    y = x.transpose(axes)       dx = dy.transpose(inverse of axes)

A reshape only relabels the array (no kernel); a permutation is a copy by :mod:`nbcoll.kernels.transpose`'s
``permute``. The Tensor methods come after the Functions, then the ``F.reshape``, ``F.transpose`` and
``F.permute`` forms. Indexing, ``x[key]``, is made of these and of index_select
(:mod:`nbcoll.tensors.ops.getitem`).

Example::

    >>> import nbcoll
    >>> x = nbcoll.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    >>> Permute.apply(x, (1, 0)).shape, x.T.reshape(-1).numpy()      # Permute.apply is what x.T does
    ((3, 2), array([1., 4., 2., 5., 3., 6.], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.kernels import transpose as transpose_kernels
from nbcoll.tensors.function import Context, Function
from nbcoll.tensors.tensor import Tensor


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
        return transpose_kernels.permute(x, ctx.axes)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple[Any, None]:
        inverse = tuple(int(a) for a in np.argsort(ctx.axes))
        return transpose_kernels.permute(dy, inverse), None


# -- Tensor methods ------------------------------------------------------------------------------------------------


def _axes_arg(axes: tuple[Any, ...]) -> tuple[Any, ...]:
    """``f(1, 0, 2)`` or ``f((1, 0, 2))``: the axes as one tuple, as NumPy takes them."""
    return tuple(axes[0]) if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)) else axes


def _reshape(self: Tensor, *shape: Any) -> Tensor:
    """``reshape(2, -1)`` or ``reshape((2, -1))``, as NumPy.

    >>> import nbcoll
    >>> nbcoll.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(2, -1).shape
    (2, 3)
    """
    return Reshape.apply(self, tuple(int(n) for n in _axes_arg(shape)))


def _flatten(self: Tensor) -> Tensor:
    """The elements as one axis, in row-major order.

    >>> import nbcoll
    >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).flatten().numpy()
    array([1., 2., 3., 4.], dtype=float32)
    """
    return self.reshape(-1)


def _transpose(self: Tensor, *axes: Any) -> Tensor:
    """``transpose()`` reverses the axes; ``transpose(1, 0, 2)`` or ``transpose((1, 0, 2))`` permutes them.

    >>> import nbcoll
    >>> x = nbcoll.tensor([[[1.0, 2.0, 3.0]]])
    >>> x.transpose().shape, x.transpose(1, 0, 2).shape
    ((3, 1, 1), (1, 1, 3))
    """
    axes = _axes_arg(axes) or tuple(range(self.ndim - 1, -1, -1))
    return Permute.apply(self, check_permutation(axes, self.ndim))


def _permute(self: Tensor, *axes: Any) -> Tensor:
    """``permute(1, 0, 2)`` or ``permute((1, 0, 2))``: the same as ``transpose`` with axes (PyTorch's name).

    >>> import nbcoll
    >>> nbcoll.tensor([[[1.0, 2.0, 3.0]]]).permute(2, 0, 1).shape
    (3, 1, 1)
    """
    return Permute.apply(self, check_permutation(_axes_arg(axes), self.ndim))


def _T(self: Tensor) -> Tensor:  # noqa: N802 - NumPy's name
    """The tensor with its axes reversed, as NumPy's ``.T``.

    >>> import nbcoll
    >>> nbcoll.tensor([[1.0, 2.0]]).T.numpy()
    array([[1.],
           [2.]], dtype=float32)
    """
    return self.transpose()


Tensor.reshape, Tensor.flatten, Tensor.transpose, Tensor.permute = _reshape, _flatten, _transpose, _permute
Tensor.T = property(_T)


# -- F.* forms -----------------------------------------------------------------------------------------------------


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
