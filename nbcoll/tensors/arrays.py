"""Small device-array helpers the tensor layer shares: constants, broadcasting and un-broadcasting.

Every value here is made by a kernel launch function or copied from the host with ``nbcoll.memory``, so the same
code runs on the ``cuda``, ``sim`` and ``numpy`` backends.

Example::

    two = scalar(2, np.float32)                  # a 0-d device array
    g = unbroadcast(grad, (3, 1))                # sum a (2, 3, 4) gradient back to (3, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.kernels import elementwise, reduce_axes

Shape = tuple[int, ...]


def from_host(host: np.ndarray) -> Any:
    """``memory.to_device`` that keeps the shape of a 0-d array (the simulator stores those as shape (1,))."""
    array = memory.to_device(host)
    if tuple(array.shape) != host.shape:
        array = array.reshape(host.shape)
    return array


def full(shape: Sequence[int], value: Any, dtype: Any) -> Any:
    """A device array of ``shape`` filled with ``value``."""
    return from_host(np.full(tuple(shape), value, dtype=dtype))


def scalar(value: Any, dtype: Any) -> Any:
    """A 0-d device array holding ``value`` converted to ``dtype``."""
    return full((), value, dtype)


def broadcast_to(x: Any, shape: Sequence[int]) -> Any:
    """A new contiguous array of ``shape`` with ``x`` repeated along its broadcast dimensions."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    # Adding zeros of the target shape is the broadcast copy: the elementwise kernel reads x with 0 strides.
    return elementwise.binary("add", memory.zeros(shape, x.dtype), x)


def unbroadcast(grad: Any, shape: Sequence[int]) -> Any:
    """Sum a gradient over the dimensions that broadcasting added or stretched, so it has ``shape`` again."""
    shape = tuple(shape)
    if tuple(grad.shape) == shape:
        return grad
    return reduce_axes.sum_to_shape(grad, shape)


def copy(x: Any) -> Any:
    """A new device array with the values of ``x``."""
    return copy_kernels.copy(memory.empty(tuple(x.shape), x.dtype), x)


def keepdims_shape(shape: Shape, axes: tuple[int, ...]) -> Shape:
    """``shape`` with every axis in ``axes`` set to 1: the shape of a reduction with ``keepdims=True``."""
    return tuple(1 if d in axes else n for d, n in enumerate(shape))


def normalize_axes(axis: Any, ndim: int, arg: str = "axis") -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints, negatives allowed) as a sorted tuple of distinct axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    normalized = []
    for a in axes:
        if not -ndim <= int(a) < max(ndim, 1):
            raise ValueError(f"{arg}: axis {a} is out of range for an array of {ndim} dimensions")
        normalized.append(int(a) % max(ndim, 1))
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{arg}: repeated axis in {axis}")
    return tuple(sorted(normalized))
