"""Accumulating in a wider type: GPUs have no atomic add for 8-bit integers and float16.

::

    accumulate_dtype(int8) = int32,  accumulate_dtype(uint8) = uint32,  accumulate_dtype(float16) = float32

The ``*_add`` operations of :mod:`nbcoll.kernels.index` and :mod:`nbcoll.kernels.lookup` add into a buffer of
the wider type, then :func:`~nbcoll.kernels.copy.cast` brings the sums back to the element type: an integer
narrowed keeps its low bytes, so the sums wrap around exactly as NumPy's 8-bit integers do.

Example::

    >>> import numpy as np
    >>> from nbcoll.kernels.widen import accumulate_dtype
    >>> accumulate_dtype(np.dtype(np.int8)), accumulate_dtype(np.dtype(np.float64))
    (dtype('int32'), dtype('float64'))
"""

from __future__ import annotations

import numpy as np

ACCUMULATE_DTYPE = {
    np.dtype(np.int8): np.dtype(np.int32),
    np.dtype(np.uint8): np.dtype(np.uint32),
    np.dtype(np.float16): np.dtype(np.float32),
}
"""The type that atomic additions use for element types that have no hardware atomic add."""


def accumulate_dtype(dtype: np.dtype) -> np.dtype:
    """The type the ``*_add`` operations accumulate ``dtype`` in: a wider one where atomics lack ``dtype``."""
    return ACCUMULATE_DTYPE.get(np.dtype(dtype), np.dtype(dtype))
