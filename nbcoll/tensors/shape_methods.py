"""The Tensor's reshaping and indexing methods: ``reshape``, ``transpose``, ``split``, ``gather``, ``index_select``...

:class:`ShapeMethods` is the part of :class:`~nbcoll.tensors.tensor.Tensor` that moves elements rather than
computing new ones (the arithmetic is in :mod:`nbcoll.tensors.methods`). As there, a method only checks its
arguments and applies the matching ``Function`` of :mod:`nbcoll.tensors.ops`, which records the backward: the
gradient of a reshape is a reshape back, that of a gather a scatter-add.

Example::

    >>> import nbcoll
    >>> from nbcoll.tensors.shape_methods import ShapeMethods
    >>> x = nbcoll.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    >>> isinstance(x, ShapeMethods), x.T.reshape(-1).numpy()
    (True, array([1., 4., 2., 5., 3., 6.], dtype=float32))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.tensors.arrays import from_host
from nbcoll.tensors.ops import indexing, join
from nbcoll.tensors.ops import shape as shape_ops

if TYPE_CHECKING:
    from nbcoll.tensors.tensor import Tensor


class ShapeMethods:
    """Reshaping and indexing methods of :class:`~nbcoll.tensors.tensor.Tensor`, which is the only class that uses
    it; it relies on the Tensor's ``_operand``, ``ndim`` and ``data``.

    >>> import nbcoll
    >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).permute(1, 0).tolist()
    [[1.0, 3.0], [2.0, 4.0]]
    """

    # -- shape -------------------------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> Tensor:
        """``reshape(2, -1)`` or ``reshape((2, -1))``, as NumPy.

        >>> import nbcoll
        >>> nbcoll.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(2, -1).shape
        (2, 3)
        """
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return shape_ops.Reshape.apply(self, tuple(int(n) for n in shape))

    def flatten(self) -> Tensor:
        """The elements as one axis, in row-major order.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).flatten().numpy()
        array([1., 2., 3., 4.], dtype=float32)
        """
        return self.reshape(-1)

    def transpose(self, *axes: Any) -> Tensor:
        """``transpose()`` reverses the axes; ``transpose(1, 0, 2)`` or ``transpose((1, 0, 2))`` permutes them.

        >>> import nbcoll
        >>> x = nbcoll.tensor([[[1.0, 2.0, 3.0]]])
        >>> x.transpose().shape, x.transpose(1, 0, 2).shape
        ((3, 1, 1), (1, 1, 3))
        """
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(self.ndim - 1, -1, -1))
        return shape_ops.Permute.apply(self, shape_ops.check_permutation(axes, self.ndim))

    def permute(self, *axes: Any) -> Tensor:
        """``permute(1, 0, 2)`` or ``permute((1, 0, 2))``: the same as ``transpose`` with axes (PyTorch's name).

        >>> import nbcoll
        >>> nbcoll.tensor([[[1.0, 2.0, 3.0]]]).permute(2, 0, 1).shape
        (3, 1, 1)
        """
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        return shape_ops.Permute.apply(self, shape_ops.check_permutation(axes, self.ndim))

    def split(self, sizes_or_sections: Any, axis: int = 0) -> tuple[Tensor, ...]:
        """Pieces along ``axis``: a list gives their lengths, an int the number of equal pieces (``np.split``).

        >>> import nbcoll
        >>> [piece.tolist() for piece in nbcoll.tensor([1.0, 2.0, 3.0, 4.0]).split(2)]
        [[1.0, 2.0], [3.0, 4.0]]
        """
        return join.split(self, sizes_or_sections, axis)

    @property
    def T(self) -> Tensor:  # noqa: N802 - NumPy's name
        """The tensor with its axes reversed, as NumPy's ``.T``.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0]]).T.numpy()
        array([[1.],
               [2.]], dtype=float32)
        """
        return self.transpose()

    # -- indexing ----------------------------------------------------------------------------------------------

    def gather(self, index: Any, axis: int) -> Tensor:
        """``out[i][j] = self[index[i][j]][j]`` for ``axis=0`` (torch.gather); ``out`` has index's shape.

        >>> import nbcoll
        >>> x = nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> x.gather(nbcoll.tensor([[1, 0]]), axis=0).numpy()        # out[0][j] = x[index[0][j]][j]
        array([[3., 2.]], dtype=float32)
        """
        return indexing.Gather.apply(self, _index_array(index), axis)

    def scatter_add(self, index: Any, src: Tensor, axis: int) -> Tensor:
        """A copy of self with ``src[i][j]`` added at ``[index[i][j]][j]`` for ``axis=0``.

        >>> import nbcoll
        >>> x = nbcoll.tensor([[0.0, 0.0], [0.0, 0.0]])
        >>> x.scatter_add(nbcoll.tensor([[1, 1]]), nbcoll.tensor([[5.0, 6.0]]), axis=0).numpy()
        array([[0., 0.],
               [5., 6.]], dtype=float32)
        """
        return indexing.ScatterAdd.apply(self, _index_array(index), self._operand(src), axis)

    def index_select(self, axis: int, index: Any) -> Tensor:
        """``np.take(self, index, axis)`` for a 1-D integer index.

        >>> import nbcoll
        >>> nbcoll.tensor([[1.0, 2.0], [3.0, 4.0]]).index_select(1, [1, 1, 0]).numpy()
        array([[2., 2., 1.],
               [4., 4., 3.]], dtype=float32)
        """
        return shape_ops.IndexSelect.apply(self, axis, _index_array(index))


def _index_array(index: Any) -> Any:
    """An index argument (Tensor, device array, NumPy array or list of ints) as a device array."""
    if isinstance(index, ShapeMethods):
        return index.data
    if memory.is_device_array(index):
        return index
    host = np.asarray(index)
    if host.dtype.kind not in "iu":
        raise TypeError(f"index: expected integers, got dtype {host.dtype}")
    return from_host(host)
