"""
Reductions: from a naive atomic sum to a shared-memory tree
===========================================================

What you learn here:

- why summing with one ``cuda.atomic.add`` per element is correct but slow: every thread of the grid updates the
  same address, and the memory system has to serialise those updates one by one;
- how a block sums its own elements in shared memory, in a tree that halves the active threads at each step,
  so that only one thread per block touches global memory;
- how a grid-stride loop lets a fixed, small grid cover any size, so the number of atomics no longer grows with n;
- how nbcoll's ``reduce_axes.reduce`` uses the same tree for sums over any axes, with no atomics at all.

Each version prints its result, its time on the host clock and how many atomics and global-memory writes it does.
Run it with ``python tutorials/03_reductions.py``. It uses the GPU where there is one and Numba's CUDA simulator
everywhere else (``NBCOLL_BACKEND=cuda|sim`` chooses). On the simulator the times measure Python threads, not a
GPU: read the counts, which are the same on both.
"""

# %%
# Set-up
# ------
#
# The input is ``N`` float32 values (1000 on the simulator, 16 million on a GPU) and the reference is NumPy's sum
# in float64. Two helpers serve every version below: ``timed`` runs a version on the host clock, and ``report``
# prints its sum next to NumPy's, its time, and how many atomics and global-memory writes it does.

import time

import numpy as np

# nbcoll is imported before numba.cuda: it decides whether numba.cuda is the GPU or the simulator.
import nbcoll
from nbcoll.backend import cuda as numba_cuda
from nbcoll.backend import device_backend
from nbcoll.kernels.reduce_axes import reduce
from nbcoll.kernels.registry import register

if nbcoll.get_backend() == "numpy":
    # This tutorial launches kernels, so it needs a device: the simulator is always there.
    print("NBCOLL_BACKEND=numpy runs NumPy instead of kernels, and this tutorial is about kernels:")
    print(f"it runs on the {device_backend()!r} backend instead.")
    nbcoll.set_backend(device_backend())

cuda = numba_cuda()
BACKEND = nbcoll.get_backend()

TREE_THREADS = 128
"""Threads per block of the tree kernels, and slots of their shared-memory scratch (a compile-time constant)."""

STRIDED_BLOCKS = 2
"""Blocks of the grid-stride version: fixed, whatever the size of the input."""

N = 1000 if BACKEND == "sim" else 1 << 24

print(f"Tutorial 03 on the {BACKEND!r} backend: summing {N} float32 values")
if BACKEND == "sim":
    print("  (Numba's CUDA simulator: every CUDA thread is a Python thread, so sizes stay small here)")
print()

rng = np.random.default_rng(0)
x_host = rng.standard_normal(N).astype(np.float32)
expected = float(np.sum(x_host, dtype=np.float64))
x = nbcoll.to_device(x_host)


def timed(launch) -> tuple[float, float]:
    """Run ``launch`` on the host clock, after a first run that compiles it on a GPU; return (result, seconds)."""
    if BACKEND == "cuda":
        launch()
        cuda.synchronize()
    start = time.perf_counter()
    result = launch()
    cuda.synchronize()
    return result, time.perf_counter() - start


def report(name: str, result: float, seconds: float, atomics: int, writes: int) -> None:
    error = abs(result - expected)
    print(f"   sum = {result:.6f} (NumPy {expected:.6f}, |difference| {error:.2g})")
    print(f"   {seconds * 1e3:9.2f} ms on the host clock   {atomics:9d} atomics   {writes:9d} global writes")
    # float32 partial sums are added in another order than NumPy's: allow for the rounding of N additions.
    assert error <= 1e-5 * N * max(1.0, float(np.max(np.abs(x_host)))), f"{name} disagrees with NumPy"


# %%
# 1. The naive sum: one atomic add per element
# --------------------------------------------
#
# Every thread adds its element straight into ``total[0]``. ``cuda.atomic.add`` makes each read-add-write
# indivisible, so no update is lost; but all ``N`` threads aim at one address, and the hardware performs those
# updates one after another. The result is right and the GPU's thousands of cores wait in a queue. (The order of
# the additions is not fixed either, so a float sum may differ in its last bits from run to run.)
#
# In the output, the sum agrees with NumPy's up to the rounding of float32 additions; the count to remember is
# ``N`` atomics, all on a single address.


@register("void(float32[::1], float32[::1])")
@cuda.jit
def atomic_sum(x, total):
    # One thread adds one element to the single total, atomically.
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(total, 0, x[i])


def run_atomic_sum() -> float:
    total = nbcoll.zeros(1, np.float32)
    atomic_sum[(N + TREE_THREADS - 1) // TREE_THREADS, TREE_THREADS](x, total)
    return float(nbcoll.to_host(total)[0])


print("1. Naive: every thread does cuda.atomic.add(total, 0, x[i])")
result, seconds = timed(run_atomic_sum)
report("atomic_sum", result, seconds, atomics=N, writes=N)
print(f"   {N} atomics, all on the same address: they are serialised")
print()

# %%
# 2. A shared-memory tree per block, then one atomic per block
# ------------------------------------------------------------
#
# The threads of a block share a small, fast memory. Each thread puts its element in ``partial[tid]``; then, in
# ``log2(TREE_THREADS)`` steps, the first half of the active threads adds the second half's values to its own::
#
#     step 64: partial[t] += partial[t + 64]   for t < 64
#     step 32: partial[t] += partial[t + 32]   for t < 32
#     ...
#     step 1:  partial[0] += partial[1]
#
# ``cuda.syncthreads()`` between steps makes every thread wait until the whole block has finished the step, so no
# thread reads a slot before it is written. Only thread 0 then touches global memory: one atomic per block.
#
# The output first runs the same tree by hand on 8 values, one line per step, each line half as long as the one
# before; then the kernel on all ``N``, with one atomic per block instead of one per element.


@register("void(float32[::1], float32[::1])")
@cuda.jit
def block_tree_sum(x, total):
    # One thread loads one element; the block sums them in a shared-memory tree; thread 0 adds the block's sum.
    partial = cuda.shared.array(TREE_THREADS, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        partial[tid] = x[i]
    else:
        partial[tid] = 0
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            partial[tid] += partial[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        cuda.atomic.add(total, 0, partial[0])


def run_block_tree_sum() -> float:
    total = nbcoll.zeros(1, np.float32)
    block_tree_sum[(N + TREE_THREADS - 1) // TREE_THREADS, TREE_THREADS](x, total)
    return float(nbcoll.to_host(total)[0])


tree_blocks = (N + TREE_THREADS - 1) // TREE_THREADS
print(f"2. Shared-memory tree: {tree_blocks} blocks of {TREE_THREADS} threads, one atomic per block")
example = np.arange(1, 9, dtype=np.float32)
print("   the tree on 8 values, step by step (the first half adds the second half):")
level = example.copy()
while len(level) > 1:
    print(f"      {level.tolist()}")
    half = len(level) // 2
    level = level[:half] + level[half:]
print(f"      {level.tolist()}  = sum {example.sum():g} after log2(8) = 3 steps")
result, seconds = timed(run_block_tree_sum)
report("block_tree_sum", result, seconds, atomics=tree_blocks, writes=tree_blocks)
print(f"   {tree_blocks} atomics instead of {N}: {N // tree_blocks}x fewer updates of the shared total")
print()

# %%
# 3. A fixed grid: each thread first sums many elements in a register
# -------------------------------------------------------------------
#
# This is a *grid-stride loop*: thread ``i`` adds ``x[i], x[i + G], x[i + 2G], ...`` where ``G`` is the number of
# threads in the grid; then the block tree runs as before. The grid no longer grows with ``N``, so neither do the
# atomics: one per block, ``STRIDED_BLOCKS`` in all. Consecutive threads still read consecutive addresses at every
# turn of the loop, so the loads coalesce. The output says how many elements each thread adds on its own (about
# 4 on the simulator's small input, tens of thousands on a GPU's) and shows the atomics down to 2.


@register("void(float32[::1], float32[::1])")
@cuda.jit
def strided_tree_sum(x, total):
    # One thread sums every gridsize-th element in a register; the block adds those in a tree; thread 0 adds it.
    partial = cuda.shared.array(TREE_THREADS, np.float32)
    tid = cuda.threadIdx.x
    running = np.float32(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        running += x[i]
    partial[tid] = running
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            partial[tid] += partial[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        cuda.atomic.add(total, 0, partial[0])


def run_strided_tree_sum() -> float:
    total = nbcoll.zeros(1, np.float32)
    strided_tree_sum[STRIDED_BLOCKS, TREE_THREADS](x, total)
    return float(nbcoll.to_host(total)[0])


grid_threads = STRIDED_BLOCKS * TREE_THREADS
print(f"3. Grid-stride loop: {STRIDED_BLOCKS} blocks of {TREE_THREADS} threads, whatever N is")
print(f"   each thread first adds about {N / grid_threads:.1f} elements in a register")
result, seconds = timed(run_strided_tree_sum)
report("strided_tree_sum", result, seconds, atomics=STRIDED_BLOCKS, writes=STRIDED_BLOCKS)
print()

# %%
# 4. nbcoll's reduction over axes
# -------------------------------
#
# ``reduce_axes.reduce`` gives every output element its own row of threads and runs the same tree; with one
# output (``axis=None``) a single block does the whole sum, and thread 0 writes it with a plain store: no
# atomics, one global write per output. A sum over an axis of a matrix writes one value per row the same way, as
# the last line shows for 8 rows.

print("4. nbcoll.kernels.reduce_axes.reduce('sum', x): one tree per output element, no atomics")
result, seconds = timed(lambda: float(nbcoll.to_host(reduce("sum", x))))
report("reduce", result, seconds, atomics=0, writes=1)
rows = x_host[: (N // 8) * 8].reshape(8, -1)
row_sums = nbcoll.to_host(reduce("sum", nbcoll.to_device(rows), axis=1))
assert np.allclose(row_sums, rows.sum(axis=1), rtol=1e-4, atol=1e-4)
print(f"   reduce('sum', x.reshape(8, {rows.shape[1]}), axis=1): 8 trees, 8 global writes, matches NumPy")
print()

# %%
# Summary
# -------
#
# The number of atomics on the one shared address, version by version. On the simulator, the times printed
# above can tell the opposite story, the naive kernel looking the quickest: there every thread is a Python
# thread and every ``syncthreads`` a costly barrier. On a GPU the naive kernel is the slowest, as the last lines
# of the output say.

print("Summary: atomics on one address")
print(f"   naive {N:>9d}   tree {tree_blocks:>9d}   grid-stride tree {STRIDED_BLOCKS:>9d}   nbcoll reduce {0:>9d}")
if BACKEND == "sim":
    print("   (simulator times measure Python threads, where every syncthreads is a costly barrier;")
    print("    on a GPU the one-address atomics of the naive version are what makes it the slowest)")
print()
print("Try it yourself: python -m nbcoll exercise block_reduce, then python -m nbcoll exercise fused_softmax")
print("Done: every reduction matched NumPy.")
