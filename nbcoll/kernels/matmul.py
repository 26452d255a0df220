"""Matrix multiplication with NumPy's ``@`` semantics, as a shared-memory tiled kernel (and a naive one to compare).

``out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]`` with the leading (batch) dimensions broadcast, float16
accumulating in float32 and integers in 64 bits (the result wraps to the input dtype, as NumPy's does).

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels.matmul import matmul
    >>> x = nbcoll.to_device(np.ones((2, 3, 4), np.float32))    # (batch, seq, d_in)
    >>> w = nbcoll.to_device(np.ones((4, 5), np.float32))       # (d_in, d_out)
    >>> matmul(x, w).shape                                      # (batch, seq, d_out)
    (2, 3, 5)
    >>> m = nbcoll.to_device(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    >>> vector = nbcoll.to_device(np.array([1.0, 1.0], np.float32))
    >>> nbcoll.to_host(matmul(m, vector))    # (M, K) @ (K,) -> (M,): 1-D operands are promoted as NumPy does
    array([3., 7.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import broadcast_shapes, broadcast_strides, flat_view, offset_of_device, size_of
from nbcoll.kernels.registry import register

TILE = 16
"""Side of the square tiles staged in shared memory; a block is TILE x TILE threads (256), fewer for thin outputs."""

MAX_GRID_Z = 65535
"""CUDA's limit on gridDim.z; longer batches are walked in a grid-stride loop."""

# ---------------------------------------------------------------------------------------------------------------
# Types.


def accumulator_dtype(dtype: np.dtype) -> np.dtype:
    """float16 and float32 accumulate in float32, float64 in float64, uint64 in uint64, other integers in int64.

    Narrow unsigned integers can accumulate in int64: the low bits of a wrapped sum are the same.
    """
    if dtype.kind == "f":
        return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
    return np.dtype(np.uint64) if dtype == np.uint64 else np.dtype(np.int64)


# ---------------------------------------------------------------------------------------------------------------
# NumPy reference.


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` computed in the accumulator type and cast back to the input dtype."""
    acc = accumulator_dtype(a.dtype)
    with np.errstate(all="ignore"):
        return np.array(np.matmul(a.astype(acc), b.astype(acc)), dtype=a.dtype, order="C")


# ---------------------------------------------------------------------------------------------------------------
# Kernels: one tiled and one naive kernel per dtype, because the accumulator and the final cast depend on it.


def _cast_type(dtype: np.dtype) -> Any:
    # Integers cast explicitly so the result wraps to the narrow type; floats are stored as they are.
    return numba.from_dtype(dtype if dtype.kind in "iu" else accumulator_dtype(dtype))


def _make_tiled_kernel(dtype: np.dtype) -> Any:
    acc_type = numba.from_dtype(accumulator_dtype(dtype))
    cast = _cast_type(dtype)

    @cuda.jit
    def tiled_kernel(a, b, out, m, k, n, batch_shape, a_batch_strides, b_batch_strides):
        # Thread (ty, tx) of block (bx, by, bz) computes out[batch, by*side + ty, bx*side + tx] for batches
        # bz, bz + gridDim.z, ..., loading one element of each staged tile per step. The block is side x side
        # threads (side = TILE, or less for thin outputs) and uses the top-left side x side of each tile.
        a_tile = cuda.shared.array((TILE, TILE), acc_type)
        b_tile = cuda.shared.array((TILE, TILE), acc_type)
        side = cuda.blockDim.x
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * side + ty
        col = cuda.blockIdx.x * side + tx
        batch_count = out.size // (m * n)
        for batch in range(cuda.blockIdx.z, batch_count, cuda.gridDim.z):
            a_base = offset_of_device(batch, batch_shape, a_batch_strides)
            b_base = offset_of_device(batch, batch_shape, b_batch_strides)
            acc = acc_type(0)
            for step in range((k + side - 1) // side):
                # Stage a[row, step*side + tx] and b[step*side + ty, col]; zeros pad the ragged edges.
                a_col = step * side + tx
                if row < m and a_col < k:
                    a_tile[ty, tx] = a[a_base + row * k + a_col]
                else:
                    a_tile[ty, tx] = 0
                b_row = step * side + ty
                if b_row < k and col < n:
                    b_tile[ty, tx] = b[b_base + b_row * n + col]
                else:
                    b_tile[ty, tx] = 0
                cuda.syncthreads()  # the tiles are complete before anyone reads them
                for j in range(side):
                    acc += a_tile[ty, j] * b_tile[j, tx]
                cuda.syncthreads()  # everyone is done with the tiles before they are overwritten
            if row < m and col < n:
                out[batch * m * n + row * n + col] = cast(acc)

    tiled_kernel.py_func.__name__ = tiled_kernel.py_func.__qualname__ = f"matmul_tiled_{dtype.name}"
    t = dtype.name
    # Batch tuples of length 1 and 2 (one and two broadcast batch dimensions); one length is enough for most types.
    batch_types = ("UniTuple(int64, 1)", "UniTuple(int64, 2)") if t == "float32" else ("UniTuple(int64, 1)",)
    signatures = [f"void({t}[::1], {t}[::1], {t}[::1], int64, int64, int64, {b}, {b}, {b})" for b in batch_types]
    return register(*signatures, name=f"kernels.matmul.matmul_tiled_{t}")(tiled_kernel)


def _make_naive_kernel(dtype: np.dtype) -> Any:
    acc_type = numba.from_dtype(accumulator_dtype(dtype))
    cast = _cast_type(dtype)

    @cuda.jit
    def naive_kernel(a, b, out, m, k, n):
        # One thread computes one output element, reading a whole row of a and a whole column of b from global
        # memory: no reuse between threads.
        col, row = cuda.grid(2)
        if row < m and col < n:
            acc = acc_type(0)
            for j in range(k):
                acc += acc_type(a[row * k + j]) * acc_type(b[j * n + col])
            out[row * n + col] = cast(acc)

    naive_kernel.py_func.__name__ = naive_kernel.py_func.__qualname__ = f"matmul_naive_{dtype.name}"
    t = dtype.name
    signature = f"void({t}[::1], {t}[::1], {t}[::1], int64, int64, int64)"
    return register(signature, name=f"kernels.matmul.matmul_naive_{t}")(naive_kernel)


TILED_KERNELS = {dtype: _make_tiled_kernel(dtype) for dtype in memory.DTYPES}
NAIVE_KERNELS = {dtype: _make_naive_kernel(dtype) for dtype in memory.DTYPES}

# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _operand(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    memory.check_dtype(x.dtype, f"{arg}.dtype")
    memory.require_contiguous(x, arg)
    if x.ndim == 0:
        raise ValueError(f"{arg}: matmul needs at least one dimension, got a 0-d array")
    return x


def _check_operands(a: Any, b: Any) -> tuple[Any, Any]:
    a, b = _operand(a, "a"), _operand(b, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"a, b: dtypes must match, got a.dtype={a.dtype} and b.dtype={b.dtype}")
    return a, b


def _shape_error(a: Any, b: Any, why: str) -> ValueError:
    return ValueError(f"a, b: cannot multiply a.shape={tuple(a.shape)} by b.shape={tuple(b.shape)}: {why}")


def tile_side(m: int, n: int) -> int:
    """Side of the tiles (and of the square block) for an (M, N) output: the power of two that covers its shorter
    side, from 4 up to TILE.

    A (4, 59) output takes 15 blocks of 4 x 4 threads rather than 4 blocks of 16 x 16, most of them idle. On a GPU
    that changes little; on the simulator, which runs every launched thread in Python, it is most of the time of a
    small matmul. Below 4 x 4 threads the simulator's cost per block outweighs the threads saved.
    """
    side = 4
    while side < min(m, n, TILE):
        side *= 2
    return side


def matmul(a: Any, b: Any) -> Any:
    """``a @ b`` with NumPy semantics: ``out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]``.

    ``a`` is (..., M, K) and ``b`` is (..., K, N); their batch dimensions broadcast. A 1-D ``a`` is read as
    (1, K) and a 1-D ``b`` as (K, 1), and the added dimension is removed from the result.

    Tiling plan: the output is cut into TILE x TILE tiles, one per block of TILE x TILE threads, each thread
    owning one output element; ``blockIdx.z`` walks the batch. The block walks the K dimension in steps of TILE:
    at each step every thread copies one element of the A tile (its block's rows, K columns step*TILE...) and
    one of the B tile (K rows step*TILE..., its block's columns) into shared memory, zero-padding past the
    edges; after a ``syncthreads`` each thread adds the TILE products of its row of the A tile and its column of
    the B tile, then a second ``syncthreads`` lets the tiles be overwritten. Every element loaded from global
    memory is thus used TILE times from shared memory: global loads drop from ``2*M*N*K`` (naive) to about
    ``M*K*ceil(N/TILE) + K*N*ceil(M/TILE)``. An output thinner than a tile gets smaller tiles (:func:`tile_side`).
    """
    a, b = _check_operands(a, b)
    _matmul_shapes(a, b)
    return _matmul(a, b)


def _matmul_shapes(a: Any, b: Any) -> tuple:
    """``(a_matrix, b_matrix, batch_shape, m, k, n, out_shape, final_shape)``; a ``ValueError`` if they do not fit."""
    a_shape, b_shape = tuple(int(s) for s in a.shape), tuple(int(s) for s in b.shape)
    a_matrix = a_shape if len(a_shape) > 1 else (1,) + a_shape
    b_matrix = b_shape if len(b_shape) > 1 else b_shape + (1,)
    m, k = a_matrix[-2:]
    if b_matrix[-2] != k:
        raise _shape_error(a, b, f"a has {k} columns but b has {b_matrix[-2]} rows")
    n = b_matrix[-1]
    try:
        batch_shape = broadcast_shapes([a_matrix[:-2], b_matrix[:-2]], ["a", "b"])
    except ValueError:
        raise _shape_error(a, b, "the batch dimensions do not broadcast") from None
    out_shape = batch_shape + (m, n)
    final_shape = batch_shape + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
    return a_matrix, b_matrix, batch_shape, m, k, n, out_shape, final_shape


@dispatch(reference=matmul_reference)
def _matmul(a: Any, b: Any) -> Any:
    a_matrix, b_matrix, batch_shape, m, k, n, out_shape, final_shape = _matmul_shapes(a, b)
    out = memory.empty(out_shape, a.dtype)
    batch_count = size_of(batch_shape)
    if batch_count * m * n > 0:
        grid_batch = batch_shape or (1,)
        a_strides = tuple(s * m * k for s in broadcast_strides(a_matrix[:-2], grid_batch))
        b_strides = tuple(s * k * n for s in broadcast_strides(b_matrix[:-2], grid_batch))
        side = tile_side(m, n)
        blocks = ((n + side - 1) // side, (m + side - 1) // side, min(batch_count, MAX_GRID_Z))
        TILED_KERNELS[a.dtype][blocks, (side, side)](
            flat_view(a),
            flat_view(b),
            flat_view(out),
            m,
            k,
            n,
            grid_batch,
            a_strides,
            b_strides,
        )
    return out.reshape(final_shape) if final_shape != out_shape else out


def matmul_naive(a: Any, b: Any) -> Any:
    """``(M, K) @ (K, N)`` with the naive kernel: one thread per output element, no shared memory.

    ``for i, j: out[i, j] = sum_k a[i, k] * b[k, j]``, each thread reading its ``2*K`` operands from global memory.
    Only for 2-D operands; it exists to be compared with the tiled :func:`matmul`.
    """
    a, b = _check_operands(a, b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise _shape_error(a, b, "matmul_naive needs (M, K) and (K, N)")
    return _matmul_naive(a, b)


@dispatch(reference=matmul_reference)
def _matmul_naive(a: Any, b: Any) -> Any:
    (m, k), n = a.shape, b.shape[1]
    out = memory.empty((m, n), a.dtype)
    if m * n > 0:
        side = tile_side(m, n)
        blocks = ((n + side - 1) // side, (m + side - 1) // side)
        NAIVE_KERNELS[a.dtype][blocks, (side, side)](flat_view(a), flat_view(b), flat_view(out), m, k, n)
    return out
