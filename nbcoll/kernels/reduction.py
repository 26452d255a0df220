"""Whole-array reduction: ``reduce_all(op, x)`` folds every element of ``x`` into one value, with a block tree.

Meaning::

    acc = identity                  # 0 for sum, the lowest value for max, the highest for min
    for i: acc = op(acc, x[i])
    return acc

How a GPU does it. Each block of ``THREADS`` threads works in three stages:

1. **Grid-stride load.** Thread ``t`` of block ``b`` folds the elements ``g, g + G, g + 2G, ...`` where
   ``g = b * THREADS + t`` and ``G`` is the number of threads in the grid, so any grid covers any ``n``.
   It writes its partial result to ``cache[t]``, a ``cuda.shared.array`` every thread of the block can read.
2. **Tree in shared memory.** With ``step = THREADS / 2, THREADS / 4, ..., 1``: threads ``t < step`` fold
   ``cache[t + step]`` into ``cache[t]``. Half of the remaining values disappear each step, so ``THREADS``
   values become one in ``log2(THREADS)`` steps. ``cuda.syncthreads()`` between steps makes every write of a
   step visible before the next step reads it. The tree is written once, in ``block_reduce.py``, and every
   kernel that folds a block (softmax, layer norm, axis reductions) calls it::

       step 4:  c0+c4  c1+c5  c2+c6  c3+c7
       step 2:  (c0+c4)+(c2+c6)   (c1+c5)+(c3+c7)
       step 1:  everything

3. **One partial per block.** Thread 0 writes ``cache[0]`` to ``partials[b]``.

Blocks cannot wait for each other inside a launch, so the ``partials`` are reduced by launching the same kernel
again on them, until one value remains: ``n`` values, then ``n / THREADS``, then ``n / THREADS**2``, ...

Sums of integers wrap around in the integer dtype, like NumPy's ``x.sum(dtype=x.dtype)``; float16 is
accumulated in float32 and rounded once at the end. Floating sums add in a different order from NumPy, so they
agree to rounding, not bit for bit.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import reduction
    >>> x = nbcoll.to_device(np.array([3.0, -1.0, 4.0, 1.5], np.float32))
    >>> total = reduction.reduce_all("sum", x)      # a NumPy scalar of x's dtype
    >>> float(total), total.dtype
    (7.5, dtype('float32'))
    >>> float(reduction.reduce_all("max", x))
    4.0
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.block_reduce import make_block_reduce, merge_values
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import blocks_for, flat_view
from nbcoll.kernels.registry import register

THREADS = 128
"""Threads per block, and the length of the shared-memory tree: a power of two, so halving always divides it."""

MAX_BLOCKS = 1024
"""At most this many blocks in one launch; beyond that each thread folds several elements in its grid-stride loop."""

REDUCTION_OPS = ("sum", "max", "min")


def _sum(a, b):
    return a + b


def _max(a, b):
    return a if a >= b else b


def _min(a, b):
    return a if a <= b else b


RULES = {"sum": _sum, "max": _max, "min": _min}

# ---------------------------------------------------------------------------------------------------------------
# NumPy reference.


def accumulation_dtype(dtype: Any) -> np.dtype:
    """The dtype partial results are kept in: float32 for float16, the dtype itself otherwise."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def identity(op: str, dtype: Any) -> Any:
    """The value that changes nothing under ``op``, in ``dtype``: 0, or the lowest/highest value for max/min."""
    dtype = np.dtype(dtype)
    if op == "sum":
        return dtype.type(0)
    limits = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    lowest, highest = (dtype.type(-np.inf), dtype.type(np.inf)) if dtype.kind == "f" else (limits.min, limits.max)
    return dtype.type(lowest if op == "max" else highest)


def reduce_reference(op: str, x: np.ndarray) -> Any:
    """The reduction in NumPy: a NumPy scalar of ``x.dtype``."""
    acc = accumulation_dtype(x.dtype)
    if op == "sum":
        with np.errstate(all="ignore"):
            return x.dtype.type(x.astype(acc).sum(dtype=acc))
    return x.dtype.type(x.max() if op == "max" else x.min())


# ---------------------------------------------------------------------------------------------------------------
# Kernels: one per op, built by a factory so that each has its rule inlined.

_SIGNATURES = (
    "void(float32[::1], float32[::1], float32)",
    "void(float16[::1], float32[::1], float32)",
    "void(int8[::1], int8[::1], int8)",
    "void(uint64[::1], uint64[::1], uint64)",
    "void(float64[::1], float64[::1], float64)",
)


def _make_reduce_kernel(op: str) -> Any:
    f = cuda.jit(device=True)(RULES[op])
    fold = make_block_reduce(merge_values(RULES[op]))

    @cuda.jit
    def reduce_kernel(x, partials, identity):
        # One thread folds its grid-stride share of x, then helps fold its block's shares into partials[block].
        cache = cuda.shared.array(THREADS, partials.dtype)
        t = cuda.threadIdx.x

        acc = identity
        i = cuda.grid(1)
        while i < x.size:
            acc = f(acc, x[i])
            i += cuda.gridsize(1)
        cache[t] = acc
        fold(cache, 0, t, THREADS, THREADS)

        if t == 0:
            partials[cuda.blockIdx.x] = cache[0]

    reduce_kernel.py_func.__name__ = reduce_kernel.py_func.__qualname__ = f"reduce_{op}"
    return register(*_SIGNATURES, name=f"kernels.reduction.reduce_{op}")(reduce_kernel)


REDUCE_KERNELS = {op: _make_reduce_kernel(op) for op in RULES}

# ---------------------------------------------------------------------------------------------------------------
# Launch function.


def reduce_all(op: str, x: Any) -> Any:
    """Fold every element of the C-contiguous device array ``x`` with ``op`` (sum, max or min).

    Returns a NumPy scalar of ``x.dtype``. The sum of an empty array is 0; its max or min is a ``ValueError``.
    """
    if op not in REDUCTION_OPS:
        raise ValueError(f"op: unknown reduction {op!r}; expected one of {', '.join(REDUCTION_OPS)}")
    x = memory.as_device_array(x, "x")
    memory.check_dtype(x.dtype, "x.dtype")
    memory.require_contiguous(x, "x")
    if x.size == 0:
        if op != "sum":
            raise ValueError(f"x: cannot take {op} of an empty array")
        return x.dtype.type(0)
    return _reduce_all(op, x)


@dispatch(reference=reduce_reference)
def _reduce_all(op: str, x: Any) -> Any:
    acc = accumulation_dtype(x.dtype)
    values = flat_view(x)
    start = acc.type(identity(op, acc))
    while True:
        blocks = min(blocks_for(values.size, THREADS), MAX_BLOCKS)
        partials = memory.empty(blocks, acc)
        REDUCE_KERNELS[op][blocks, THREADS](values, partials, start)
        if blocks == 1:
            return x.dtype.type(partials.copy_to_host()[0])
        values = partials
