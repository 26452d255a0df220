"""Permuting axes into a new contiguous array: NumPy's ``transpose(axes)``, materialised.

A copy moves bits and never looks at their meaning, so every kernel here works on the unsigned integer of the
element's width (float32 travels as uint32, int8 as uint8): four kernels per pattern serve all nine dtypes.

Two kernels:

* ``swap_last_two_kernel`` for ``(..., R, C) -> (..., C, R)``, the transpose of every matrix of a batch. A naive
  copy either reads or writes with a stride of R or C elements, and strided accesses waste most of each memory
  transaction. Here a block reads a 32 x 32 tile with consecutive threads on consecutive columns (coalesced),
  parks it in shared memory, and writes it back transposed, again with consecutive threads on consecutive
  addresses. The tile has 33 columns so that a column of the tile falls in 32 different shared-memory banks.
* ``permute_kernel`` for any other order: one thread per output element, its source found by ``offset_of`` with
  the input strides taken in the new axis order.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels.transpose import permute, transpose
    >>> x = nbcoll.to_device(np.zeros((2, 5, 4, 3), np.float32))
    >>> permute(x, (0, 2, 1, 3)).shape     # (batch, seq, heads, dim) -> (batch, heads, seq, dim)
    (2, 4, 5, 3)
    >>> w = nbcoll.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> nbcoll.to_host(transpose(w))       # (d_in, d_out) -> (d_out, d_in)
    array([[0., 3.],
           [1., 4.],
           [2., 5.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import contiguous_strides, flat_view, launch_1d, offset_of_device, size_of
from nbcoll.kernels.registry import register

TILE_DIM = 32
"""Side of the square tile a block transposes through shared memory."""

BLOCK_ROWS = 8
"""Rows of threads in a block: a block is TILE_DIM x BLOCK_ROWS threads, each moving TILE_DIM / BLOCK_ROWS elements."""

PADDED_TILE_DIM = TILE_DIM + 1
"""Columns of the shared tile: one spare column shifts each row by one bank, so a tile column hits 32 banks."""

MAX_GRID_Z = 65535
"""CUDA's limit on gridDim.z; longer batches are walked in a grid-stride loop."""

_BIT_TYPES = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}

# ---------------------------------------------------------------------------------------------------------------
# NumPy reference.


def permute_reference(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """``out[i0, ..., ik] = x[i_axes^-1 ...]``: NumPy's ``transpose(axes)`` as a new contiguous array."""
    return np.array(np.transpose(x, axes), order="C")  # always a copy, even for the identity order


# ---------------------------------------------------------------------------------------------------------------
# Kernels, one of each per element width.


def _make_swap_last_two_kernel(bits_dtype: np.dtype) -> Any:
    element = numba.from_dtype(bits_dtype)

    @cuda.jit
    def swap_last_two_kernel(x, out, rows, cols):
        # Block (bx, by, bz) moves the side x side tile at rows by*side..., columns bx*side... of matrix bz (and
        # bz + gridDim.z, ...), side = blockDim.x (TILE_DIM, or less for thin matrices, a multiple of blockDim.y);
        # each thread moves side / blockDim.y elements of the tile.
        tile = cuda.shared.array((TILE_DIM, PADDED_TILE_DIM), element)
        side = cuda.blockDim.x
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        batch_count = x.size // (rows * cols)
        for batch in range(cuda.blockIdx.z, batch_count, cuda.gridDim.z):
            base = batch * rows * cols
            # Read: consecutive tx on consecutive columns of x.
            col = cuda.blockIdx.x * side + tx
            for j in range(0, side, cuda.blockDim.y):
                row = cuda.blockIdx.y * side + ty + j
                if row < rows and col < cols:
                    tile[ty + j, tx] = x[base + row * cols + col]
            cuda.syncthreads()
            # Write: consecutive tx on consecutive columns of out, which are rows of x.
            out_col = cuda.blockIdx.y * side + tx
            for j in range(0, side, cuda.blockDim.y):
                out_row = cuda.blockIdx.x * side + ty + j
                if out_row < cols and out_col < rows:
                    out[base + out_row * rows + out_col] = tile[tx, ty + j]
            cuda.syncthreads()  # the tile is free again before the next batch overwrites it

    name = f"swap_last_two_{bits_dtype.name}"
    swap_last_two_kernel.py_func.__name__ = swap_last_two_kernel.py_func.__qualname__ = name
    t = bits_dtype.name
    return register(f"void({t}[::1], {t}[::1], int64, int64)", name=f"kernels.transpose.{name}")(swap_last_two_kernel)


@register(
    "void(uint32[::1], uint32[::1], UniTuple(int64, 3), UniTuple(int64, 3))",
    "void(uint8[::1], uint8[::1], UniTuple(int64, 4), UniTuple(int64, 4))",
    "void(uint64[::1], uint64[::1], UniTuple(int64, 2), UniTuple(int64, 2))",
    "void(uint16[::1], uint16[::1], UniTuple(int64, 1), UniTuple(int64, 1))",
)
@cuda.jit
def permute_kernel(x, out, out_shape, source_strides):
    # One thread writes one output element, reading it wherever the permuted axes put it in x.
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[offset_of_device(i, out_shape, source_strides)]


SWAP_KERNELS = {size: _make_swap_last_two_kernel(bits) for size, bits in _BIT_TYPES.items()}

# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _permutation(axes: Any, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    try:
        items = [int(a) for a in axes]
    except TypeError:
        raise TypeError(f"axes: expected a sequence of ints, got {axes!r}") from None
    if len(items) != ndim or any(not -ndim <= a < ndim for a in items):
        raise ValueError(f"axes: {tuple(items)} is not a permutation of the {ndim} axes of x")
    normalized = tuple(a % ndim for a in items)
    if sorted(normalized) != list(range(ndim)):
        raise ValueError(f"axes: {tuple(items)} is not a permutation of the {ndim} axes of x (repeated axis)")
    return normalized


def _is_last_two_swap(axes: tuple[int, ...]) -> bool:
    ndim = len(axes)
    return ndim >= 2 and axes == tuple(range(ndim - 2)) + (ndim - 1, ndim - 2)


def swap_block(rows: int, cols: int) -> tuple[int, int]:
    """The tile side and the rows of threads for swapping (rows, cols) matrices: (TILE_DIM, BLOCK_ROWS), or less.

    A thin matrix gets a smaller tile, the power of two that covers its shorter side (at least 4): a (59, 4)
    matrix takes 15 blocks of 4 x 4 threads rather than 2 blocks of 32 x 8, most of them idle. On a GPU that
    changes little; on the simulator, which runs every launched thread in Python, it is most of the time of a
    small transpose.
    """
    side = 4
    while side < min(rows, cols, TILE_DIM):
        side *= 2
    return side, min(BLOCK_ROWS, side)


def _bits(x: Any) -> Any:
    """``x`` flattened and viewed as unsigned integers of its element width."""
    return flat_view(x).view(_BIT_TYPES[x.dtype.itemsize])


def permute(x: Any, axes: Sequence[int] | None) -> Any:
    """A contiguous copy of ``x`` with its axes reordered: ``out.shape[d] == x.shape[axes[d]]``.

    ``for index in out: out[index] = x[index placed back in x's axis order]`` — NumPy's ``transpose(axes)``;
    negative axes count from the end and ``None`` reverses them. Swapping the last two axes uses the
    shared-memory tile; every other order uses the one-thread-per-element kernel.
    """
    x = memory.as_device_array(x, "x")
    memory.check_dtype(x.dtype, "x.dtype", allow_bool=True)
    memory.require_contiguous(x, "x")
    return _permute(x, _permutation(axes, x.ndim))


@dispatch(reference=permute_reference)
def _permute(x: Any, order: tuple[int, ...]) -> Any:
    shape = tuple(int(s) for s in x.shape)
    out_shape = tuple(shape[a] for a in order)
    out = memory.empty(out_shape, x.dtype)
    count = size_of(shape)
    if count == 0:
        return out
    if _is_last_two_swap(order):
        rows, cols = shape[-2:]
        batch_count = count // (rows * cols)
        side, block_rows = swap_block(rows, cols)
        blocks = ((cols + side - 1) // side, (rows + side - 1) // side, min(batch_count, MAX_GRID_Z))
        SWAP_KERNELS[x.dtype.itemsize][blocks, (side, block_rows)](_bits(x), _bits(out), rows, cols)
        return out
    strides = contiguous_strides(shape)
    source_strides = tuple(strides[a] for a in order) or (0,)
    launch_1d(permute_kernel, count, _bits(x), _bits(out), out_shape or (1,), source_strides)
    return out


def transpose(x: Any) -> Any:
    """Swap the last two axes: ``out[..., j, i] = x[..., i, j]``, a new contiguous array. ``x`` needs ndim >= 2."""
    x = memory.as_device_array(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x: transpose swaps the last two axes and needs ndim >= 2, got shape {tuple(x.shape)}")
    axes = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return permute(x, axes)
