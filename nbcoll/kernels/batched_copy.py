"""Batched copy: many small copies in one launch, driven by a table of descriptors.

::

    batched_copy:   for i: k = segment holding i; dst[dst_offsets[k] + j] = src[src_offsets[k] + j]
                           (j = i - start of segment k)

This is how a scatter-gather DMA engine works: it walks a table of (source offset, destination offset, length)
descriptors, so many small copies cost one launch. The table is built and checked on the host
(:class:`CopyDescriptors`); each thread of the kernel finds its segment by binary search over the segments'
starts.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels.batched_copy import batched_copy
    >>> src = nbcoll.to_device(np.arange(6, dtype=np.float32))
    >>> dst = nbcoll.to_device(np.zeros(5, np.float32))
    >>> nbcoll.to_host(batched_copy(dst, src, [4, 0], [0, 2], [2, 3]))   # src[4:6] -> dst[0:2], src[0:3] -> dst[2:5]
    array([4., 5., 0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import backend, memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import launch_1d
from nbcoll.kernels.registry import register

# ---------------------------------------------------------------------------------------------------------------
# Descriptor table: built on the host, read by every thread of the kernel.


@dataclass(frozen=True)
class CopyDescriptors:
    """The segments of a batched copy, as int64 arrays, with empty segments dropped.

    Example::

        >>> table = CopyDescriptors.build([0, 10], [5, 0], [3, 4])
        >>> table.starts        # segment k covers elements starts[k] .. starts[k] + lengths[k] - 1
        array([0, 3])
        >>> table.total         # elements to copy, one thread each
        7
    """

    src_offsets: np.ndarray
    dst_offsets: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    """Exclusive prefix sums of ``lengths``: where each segment begins in the concatenation of all segments."""

    @property
    def total(self) -> int:
        return int(self.lengths.sum())

    @classmethod
    def build(cls, src_offsets: Any, dst_offsets: Any, lengths: Any) -> CopyDescriptors:
        columns = [
            _int_column(src_offsets, "src_offsets"),
            _int_column(dst_offsets, "dst_offsets"),
            _int_column(lengths, "lengths"),
        ]
        if len({c.size for c in columns}) != 1:
            raise ValueError(
                "src_offsets, dst_offsets, lengths: must have one entry per segment, got "
                f"{columns[0].size}, {columns[1].size} and {columns[2].size} entries"
            )
        src_off, dst_off, length = columns
        keep = length > 0
        src_off, dst_off, length = src_off[keep], dst_off[keep], length[keep]
        starts = np.zeros(length.size, np.int64)
        np.cumsum(length[:-1], out=starts[1:])
        return cls(src_off, dst_off, length, starts)


def _int_column(values: Any, arg: str) -> np.ndarray:
    column = np.asarray(values)
    if column.size == 0:
        return np.zeros(0, np.int64)
    if column.ndim != 1 or column.dtype.kind not in "iu":
        raise TypeError(f"{arg}: expected a 1-D sequence of integers, got {column.dtype} of shape {column.shape}")
    if (column < 0).any():
        raise ValueError(f"{arg}: entries must be >= 0, got {int(column.min())} at index {int(column.argmin())}")
    return column.astype(np.int64)


def _check_bounds(table: CopyDescriptors, src_size: int, dst_size: int) -> None:
    for offsets, size, name, arg in (
        (table.src_offsets, src_size, "src", "src_offsets"),
        (table.dst_offsets, dst_size, "dst", "dst_offsets"),
    ):
        ends = offsets + table.lengths
        if ends.size and ends.max() > size:
            k = int(ends.argmax())
            raise ValueError(f"{arg}: a segment covers {name}[{offsets[k]}:{ends[k]}], beyond {name}.size={size}")
    order = np.argsort(table.dst_offsets, kind="stable")
    begins, ends = table.dst_offsets[order], (table.dst_offsets + table.lengths)[order]
    clash = np.nonzero(begins[1:] < ends[:-1])[0]
    if clash.size:
        k = int(clash[0])
        raise ValueError(
            f"dst_offsets: segments overlap in dst: dst[{begins[k]}:{ends[k]}] and dst[{begins[k + 1]}:{ends[k + 1]}]"
        )


# ---------------------------------------------------------------------------------------------------------------
# NumPy reference.


def batched_copy_reference(dst: np.ndarray, src: np.ndarray, table: CopyDescriptors) -> np.ndarray:
    """``for k: dst[dst_offsets[k] : +lengths[k]] = src[src_offsets[k] : +lengths[k]]``."""
    for s, d, n in zip(table.src_offsets, table.dst_offsets, table.lengths, strict=True):
        dst[d : d + n] = src[s : s + n]
    return dst


# ---------------------------------------------------------------------------------------------------------------
# Kernel.


def _segment_of(starts, i):
    """The segment that holds element ``i`` of the concatenation: the largest ``k`` with ``starts[k] <= i``.

    A binary search: ``starts`` is increasing because empty segments were dropped.
    """
    lo = 0
    hi = starts.size - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= i:
            lo = mid
        else:
            hi = mid - 1
    return lo


segment_of_device = cuda.jit(device=True)(_segment_of)


@register(
    "void(float32[::1], float32[::1], int64[::1], int64[::1], int64[::1], int64)",
    "void(float16[::1], float16[::1], int64[::1], int64[::1], int64[::1], int64)",
    "void(int8[::1], int8[::1], int64[::1], int64[::1], int64[::1], int64)",
    "void(uint64[::1], uint64[::1], int64[::1], int64[::1], int64[::1], int64)",
    "void(float64[::1], float64[::1], int64[::1], int64[::1], int64[::1], int64)",
)
@cuda.jit
def batched_copy_kernel(dst, src, src_offsets, dst_offsets, starts, total):
    # One thread copies one element of the concatenated segments: it finds its segment, then its place in it.
    i = cuda.grid(1)
    if i < total:
        k = segment_of_device(starts, i)
        j = i - starts[k]
        dst[dst_offsets[k] + j] = src[src_offsets[k] + j]


# ---------------------------------------------------------------------------------------------------------------
# Launch function: check the arguments, then run the kernel or, on the numpy backend, the reference.


def batched_copy(dst: Any, src: Any, src_offsets: Any, dst_offsets: Any, lengths: Any) -> Any:
    """``for k: dst[dst_offsets[k] : +lengths[k]] = src[src_offsets[k] : +lengths[k]]`` in one kernel launch.

    ``dst`` and ``src`` are 1-D C-contiguous device arrays of one dtype and must not share memory. Segments may
    read overlapping parts of ``src`` but must write disjoint parts of ``dst``. The launch builds a
    :class:`CopyDescriptors` table and gives one thread to each element of all segments together; each thread
    finds its segment by binary search over the segments' starts. Returns ``dst``.
    """
    dst, src = memory.contiguous_input(dst, "dst"), memory.contiguous_input(src, "src")
    if dst.dtype != src.dtype:
        raise TypeError(
            f"dst: dtype must match src, got dst.dtype={dst.dtype} and src.dtype={src.dtype}; use cast_into to convert"
        )
    for x, arg in ((dst, "dst"), (src, "src")):
        if x.ndim != 1:
            raise ValueError(f"{arg}: expected a 1-D array, got shape {tuple(x.shape)}; pass a flat view")
    table = CopyDescriptors.build(src_offsets, dst_offsets, lengths)
    _check_bounds(table, src.size, dst.size)
    return _batched_copy(dst, src, table)


@dispatch(reference=batched_copy_reference)
def _batched_copy(dst: Any, src: Any, table: CopyDescriptors) -> Any:
    if table.total == 0:
        return dst
    to_device = backend.cuda().to_device
    launch_1d(
        batched_copy_kernel,
        table.total,
        dst,
        src,
        to_device(table.src_offsets),
        to_device(table.dst_offsets),
        to_device(table.starts),
        table.total,
    )
    return dst
