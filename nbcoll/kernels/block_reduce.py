"""The block-wide tree reduction in shared memory, written once and shared by every kernel that folds a block.

The threads of a block (or of one row of a 2-D block) each put a partial value in their slot of a shared-memory
scratch, then fold the row into its first slot in ``log2(width)`` steps::

    active = min(width, count)                  # only the first `count` slots hold values
    for step in width/2, width/4, ..., 1:       # all lanes of a step at once, a barrier between steps
        for lane < step with lane + step < active:
            merge(scratch, first + lane, first + lane + step)   # fold slot lane + step into slot lane
        active = min(active, step)

    step 4:  c0+c4  c1+c5  c2+c6  c3+c7
    step 2:  (c0+c4)+(c2+c6)   (c1+c5)+(c3+c7)
    step 1:  everything

Half of the values disappear at each step. ``cuda.syncthreads()`` before the first step and after each one makes
every write visible before the next read, so when :func:`make_block_reduce`'s function returns, every thread
of the block can read the result in ``scratch[first]``.

``merge(scratch, into, other)`` folds slot ``other`` into slot ``into``. For a scratch of plain values it is
``scratch[into] = combine(scratch[into], scratch[other])`` (:func:`merge_values`); argmax keeps a value and an
index per slot and merges both (see ``reduce_axes.py``). Numba compiles one copy of the tree per merge rule, as
if it had been written out by hand in each kernel.

Example, a kernel with one row of threads per block (``block_sum`` is defined below)::

    @cuda.jit
    def row_sum_kernel(x, out):
        # Thread t sums the columns t, t + blockDim.x, ... of row blockIdx.x; the block adds the partial sums.
        scratch = cuda.shared.array(THREADS, float32)
        partial = float32(0)
        for c in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
            partial += x[cuda.blockIdx.x, c]
        total = block_sum(scratch, partial)
        if cuda.threadIdx.x == 0:
            out[cuda.blockIdx.x] = total
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import cuda


def add(a, b):
    return a + b


def larger(a, b):
    return a if a >= b else b


def merge_values(combine: Callable[[Any, Any], Any]) -> Callable[[Any, int, int], None]:
    """The merge rule of a scratch of plain values: ``scratch[into] = combine(scratch[into], scratch[other])``."""
    combine_device = cuda.jit(device=True)(combine)

    def merge(scratch, into, other):
        scratch[into] = combine_device(scratch[into], scratch[other])

    return merge


def make_block_reduce(merge: Callable[[Any, int, int], None]) -> Any:
    """A device function ``block_reduce(scratch, first, lane, width, count)`` that folds one row of ``scratch``.

    Lane ``lane`` of a row of ``width`` lanes (a power of two, the same for every thread of the block) owns slot
    ``first + lane``; the first ``min(width, count)`` slots hold values. Every thread of the block must call it,
    since it waits at barriers; afterwards ``scratch[first]`` holds the row's result and every thread may read it.
    """
    merge_device = cuda.jit(device=True)(merge)

    def block_reduce(scratch, first, lane, width, count):
        # One thread folds its partner's slot into its own at each step where it is still active.
        active = min(width, count)
        step = width // 2
        cuda.syncthreads()  # every slot is written before any is read
        while step > 0:
            if lane < step and lane + step < active:
                merge_device(scratch, first + lane, first + lane + step)
            cuda.syncthreads()
            active = min(active, step)
            step //= 2

    return cuda.jit(device=True)(block_reduce)


def make_block_total(block_reduce: Any) -> Any:
    """A device function ``total = block_total(scratch, value)`` for a 1-D block, from a :func:`make_block_reduce`
    function: every thread gives a value and gets the fold of all of them. ``scratch`` has at least
    ``blockDim.x`` slots, and ``blockDim.x`` is a power of two.
    """

    def block_total(scratch, value):
        lane = cuda.threadIdx.x
        scratch[lane] = value
        block_reduce(scratch, 0, lane, cuda.blockDim.x, cuda.blockDim.x)
        total = scratch[0]
        cuda.syncthreads()  # every thread has read the total before the scratch is written again
        return total

    return cuda.jit(device=True)(block_total)


# fold_sum(scratch, first, lane, width, count): scratch[first] becomes the sum of the row's slots.
fold_sum = make_block_reduce(merge_values(add))

# total = block_sum(scratch, value): the sum of every thread's value, given to every thread.
block_sum = make_block_total(fold_sum)

# largest = block_max(scratch, value): the largest of every thread's value, given to every thread.
block_max = make_block_total(make_block_reduce(merge_values(larger)))
