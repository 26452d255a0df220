"""``x[key]``: basic indexing (integers, slices, ``...``, ``None``) and advanced indexing (integer arrays, boolean
masks), with NumPy's and PyTorch's rules.

::

    y = x[1, 2:5]       basic: one index_select per indexed axis, then a reshape that drops the integer axes
    y = x[idx]          idx integers of any shape (a list, NumPy array or Tensor): y.shape = idx.shape + x.shape[1:]
    y = x[mask]         mask booleans of x's leading shape: the positions where it is true, in row-major order
    y = x[:, idx]       the basic entries first; then the advanced ones pick from the axes they index

The advanced entries (integer arrays; masks, which stand for the arrays of their true positions; and integers
beside them) broadcast together to one shape ``B``. The axes they index are made one (permuted next to each other
if they are not, then reshaped), and one ``index_select`` of the flat positions reads ``B`` of them, so the
backward is index_select's scatter-add: ``dx = zeros; dx[positions[j]] += dy[j]``, where a position picked twice
receives both gradients. As in NumPy, ``B``'s axes stand where the advanced entries stood when those are next to
each other, and in front when they are not. The Functions are those of :mod:`nbcoll.tensors.ops.shape` and
:mod:`nbcoll.tensors.ops.indexing`; this module gives Tensor its ``__getitem__``.

Example::

    >>> import numpy as np, nbcoll
    >>> x = nbcoll.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    >>> x[:, [2, 0, 2]].sum().backward()             # column 2 picked twice: it gets two gradients
    >>> x.grad.numpy()
    array([[1., 0., 2.],
           [1., 0., 2.]])
    >>> x[x > 2.5].numpy()                            # a bool Tensor mask
    array([3., 4., 5.])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.tensors.arrays import from_host
from nbcoll.tensors.ops.indexing import IndexSelect
from nbcoll.tensors.ops.shape import Permute, Reshape
from nbcoll.tensors.tensor import Tensor

KEY_ENTRIES = "integers, slices, '...', None, integer arrays and boolean masks"


def _entry(k: Any) -> Any:
    """One entry of a key as ``None``, ``...``, a slice, an int, or a NumPy array of int64 or bool (advanced)."""
    if k is None or k is Ellipsis or isinstance(k, slice):
        return k
    if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
        return int(k)
    if isinstance(k, Tensor):
        k = k.numpy()
    elif memory.is_device_array(k):
        k = memory.to_host(k)
    elif isinstance(k, (list, tuple)):
        try:
            k = np.asarray(k)
        except ValueError:
            raise IndexError(f"index: a list index must be rectangular, got {k!r}") from None
        if k.size == 0:
            k = k.astype(np.int64)  # [] picks nothing, as in NumPy
    if not isinstance(k, np.ndarray) or k.ndim == 0 and k.dtype == np.bool_:
        raise TypeError(f"index: expected {KEY_ENTRIES}, got {k!r}")
    if k.dtype == np.bool_:
        return k
    if k.dtype.kind not in "iu":
        raise IndexError(f"index: arrays used as indices must be of integer or boolean type, got dtype {k.dtype}")
    return int(k) if k.ndim == 0 else k.astype(np.int64)


def _axes_used(k: Any) -> int:
    if k is None or k is Ellipsis:
        return 0
    return k.ndim if isinstance(k, np.ndarray) and k.dtype == np.bool_ else 1


def _expand_key(key: Any, ndim: int) -> list[Any]:
    """The key's entries with one per axis of x, plus the ``None`` entries that insert new axes."""
    entries = [_entry(k) for k in (key if isinstance(key, tuple) else (key,))]
    if sum(k is Ellipsis for k in entries) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(_axes_used(k) for k in entries)
    if used > ndim:
        raise IndexError(f"too many indices: {used} given for a tensor of {ndim} dimensions")
    fill = [slice(None)] * (ndim - used)
    at = next((i for i, k in enumerate(entries) if k is Ellipsis), len(entries))
    return entries[:at] + fill + entries[at + 1 :]


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` (``Tensor.__getitem__``) as a new Tensor, for every key of :data:`KEY_ENTRIES`; see the module's
    description."""
    entries = _expand_key(key, x.ndim)
    if not any(isinstance(k, np.ndarray) for k in entries):
        return _basic(x, entries)
    basic, picks = _split_advanced(x.shape, entries)
    return _pick(_basic(x, basic), picks)


def _basic(x: Any, entries: list[Any]) -> Any:
    """Integers, slices and ``None`` (one entry per axis of x, plus the ``None`` ones)."""
    out_shape: list[int] = []
    y, axis = x, 0
    for k in entries:
        if k is None:
            out_shape.append(1)
            continue
        size = x.shape[axis]
        if isinstance(k, slice):
            positions = range(*k.indices(size))
            out_shape.append(len(positions))
        else:
            if not -size <= k < size:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {size}")
            positions = range(k % size, k % size + 1)
        if positions != range(size):
            y = IndexSelect.apply(y, axis, from_host(np.array(positions, dtype=np.int64)), unique=True)
        axis += 1
    return Reshape.apply(y, tuple(out_shape))


def _split_advanced(shape: tuple[int, ...], entries: list[Any]) -> tuple[list[Any], list[tuple[int, np.ndarray]]]:
    """The basic part of the key (every advanced entry a full slice), and ``(axis of its result, positions in
    [0, size))`` for every axis that an advanced entry indexes; a mask stands for one array per axis it covers."""
    basic: list[Any] = []
    picks: list[tuple[int, np.ndarray]] = []
    axis = 0  # of x
    for k in entries:
        if k is None or isinstance(k, slice):
            basic.append(k)
            if k is not None:  # None inserts an axis of the result, not one of x
                axis += 1
            continue
        if isinstance(k, np.ndarray) and k.dtype == np.bool_:
            covered = shape[axis : axis + k.ndim]
            if k.shape != covered:
                raise IndexError(
                    f"index: a boolean mask of shape {k.shape} must match the shape {covered} of the axes "
                    f"{axis}..{axis + k.ndim - 1} it indexes, of a tensor of shape {shape}"
                )
            arrays: tuple[np.ndarray, ...] = np.nonzero(k)
        else:  # integers beside an array are advanced too, as in NumPy: they broadcast with it
            size = shape[axis]
            positions = np.asarray(k, np.int64)
            bad = (positions < -size) | (positions >= size)
            if bad.any():
                raise IndexError(f"index: {positions[bad][0]} is out of bounds for axis {axis} with size {size}")
            arrays = (positions % size,)
        for positions in arrays:
            picks.append((len(basic), positions))
            basic.append(slice(None))
        axis += len(arrays)
    return basic, picks


def _pick(y: Any, picks: list[tuple[int, np.ndarray]]) -> Any:
    """``y`` indexed on each pick's axis by its positions, all broadcast together: one index_select."""
    axes = [axis for axis, _ in picks]
    try:
        positions = np.broadcast_arrays(*(p for _, p in picks))
    except ValueError:
        shapes = [p.shape for _, p in picks]
        raise IndexError(f"index: the index arrays' shapes {shapes} do not broadcast together") from None
    if axes != list(range(axes[0], axes[0] + len(axes))):  # apart: bring them to the front, where B goes
        y = Permute.apply(y, tuple(axes) + tuple(d for d in range(y.ndim) if d not in axes))
        axes = list(range(len(axes)))
    first, sizes = axes[0], tuple(y.shape[a] for a in axes)
    before, after = tuple(y.shape[:first]), tuple(y.shape[first + len(axes) :])
    flat = np.ravel_multi_index(tuple(positions), sizes) if positions[0].size else np.zeros(0, np.int64)
    merged = Reshape.apply(y, (*before, int(np.prod(sizes)), *after))
    picked = IndexSelect.apply(merged, first, from_host(flat.reshape(-1).astype(np.int64)))
    return Reshape.apply(picked, (*before, *positions[0].shape, *after))


Tensor.__getitem__ = getitem
