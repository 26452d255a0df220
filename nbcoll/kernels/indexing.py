"""The one indexing helper every kernel and every backend shares, and the launch-geometry arithmetic.

A contiguous array of shape ``(d0, d1, ..., dk)`` stores element ``(i0, ..., ik)`` at
``offset = i0*s0 + i1*s1 + ... + ik*sk`` where ``s`` are its strides in elements. Broadcasting is the same rule
with a stride of 0 on every broadcast dimension, so the same few lines serve map, zip, copy and reduction
kernels, on the GPU (compiled as a device function) and in the NumPy references (called as plain Python).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from numba import cuda

THREADS_PER_BLOCK = 256
"""Threads per block for 1-D launches: a multiple of the 32-thread warp, small enough for any GPU."""

WARP_SIZE = 32


def blocks_for(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """Blocks needed so that ``blocks * threads >= n`` (at least one)."""
    return max(1, (n + threads - 1) // threads)


def threads_for(n: int) -> int:
    """Threads per block for an ``n``-element problem: whole warps, at most :data:`THREADS_PER_BLOCK`.

    A small problem gets one small block rather than a block of mostly idle threads. On a GPU this changes
    little; on the simulator, which runs every launched thread in Python, it is the difference between
    milliseconds and a tenth of a second per launch.
    """
    return min(THREADS_PER_BLOCK, max(WARP_SIZE, -(-n // WARP_SIZE) * WARP_SIZE))


def launch_1d(kernel, n: int, *args) -> None:
    """Launch ``kernel`` with one thread per element of an ``n``-element problem; nothing to do for ``n == 0``."""
    if n == 0:
        return
    threads = threads_for(n)
    kernel[blocks_for(n, threads), threads](*args)


def offset_of(flat_index, shape, strides):
    """Memory offset, in elements, of the element whose row-major position is ``flat_index``.

    ``for d = last .. first: offset += (flat_index % shape[d]) * strides[d]; flat_index //= shape[d]``
    """
    offset = 0
    for d in range(len(shape) - 1, -1, -1):
        offset += (flat_index % shape[d]) * strides[d]
        flat_index //= shape[d]
    return offset


offset_of_device = cuda.jit(device=True)(offset_of)


def flat_view(x):
    """A 1-D view of the C-contiguous array ``x``, the shape every 1-D kernel takes: ``flat[i] = x[unravel(i)]``.

    A 0-d array becomes shape ``(1,)``. The same call serves device arrays, simulator arrays and NumPy arrays.
    """
    return x if x.ndim == 1 else x.reshape(size_of(x.shape))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a contiguous array of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def broadcast_shapes(shapes: Sequence[Sequence[int]], names: Sequence[str]) -> tuple[int, ...]:
    """NumPy's broadcast rule; a ``ValueError`` names the arguments whose shapes cannot broadcast."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            described = ", ".join(f"{n}.shape={tuple(s)}" for n, s in zip(names, shapes, strict=True))
            raise ValueError(f"{', '.join(names)}: shapes cannot broadcast together ({described})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides that read a contiguous array of ``shape`` as if it had ``out_shape``: 0 where broadcast."""
    shape = tuple(int(d) for d in shape)
    own = contiguous_strides(shape)
    lead = len(out_shape) - len(shape)
    return tuple(0 if d < lead or shape[d - lead] == 1 else own[d - lead] for d in range(len(out_shape)))


def size_of(shape: Sequence[int]) -> int:
    return math.prod(int(s) for s in shape)
