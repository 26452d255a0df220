"""The argument checks that gather, scatter and the row lookups share, and the one place their kernels start.

Every index is checked on the host before any kernel runs: an index out of range raises ``IndexError`` naming the
argument and the bad value, instead of a kernel reading or writing outside an array.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels.index_args import check_indices
    >>> check_indices(nbcoll.to_device(np.array([0, 2, 3])), 3, "ids")
    Traceback (most recent call last):
        ...
    IndexError: ids: index 3 at position (2,) is out of range [0, 3) (found 1 bad value(s))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels.indexing import launch_1d


def launch(kernel: Any, n: int, *args: Any) -> None:
    """The one place index kernels are started (tests replace it to prove that bad indices never reach a kernel)."""
    launch_1d(kernel, n, *args)


def index_input(index: Any, arg: str) -> Any:
    """``index`` as a C-contiguous device array of an integer dtype, or an error naming ``arg``."""
    index = memory.as_device_array(index, arg)
    if np.dtype(index.dtype).kind not in "iu":
        raise TypeError(f"{arg}.dtype: indices must have an integer dtype, got {index.dtype}")
    memory.require_contiguous(index, arg)
    return index


def positive_axis(axis: int, ndim: int) -> int:
    """``axis`` of an ``ndim``-d array counted from the front, or a ``ValueError`` naming ``axis``."""
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis: expected an int in [{-ndim}, {ndim}) for a {ndim}-d array, got {axis!r}")
    return int(axis) % ndim


def check_indices(index: Any, size: int, arg: str, allow_negative: bool = False) -> None:
    """Raise ``IndexError`` naming ``arg`` and the first bad value unless every index is in ``[0, size)``.

    With ``allow_negative`` (NumPy's ``take``), ``[-size, size)`` is accepted instead.
    """
    host = memory.to_host(index)
    if host.size == 0:
        return
    low = -size if allow_negative else 0
    values = host.astype(np.int64) if host.dtype != np.uint64 else host
    bad = (values < low) | (values >= size) if host.dtype != np.uint64 else values >= np.uint64(size)
    if bad.any():
        position = tuple(int(p) for p in np.argwhere(bad)[0])
        raise IndexError(
            f"{arg}: index {host[position]} at position {position} is out of range [{low}, {size}) "
            f"(found {int(bad.sum())} bad value(s))"
        )
