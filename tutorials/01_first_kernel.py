"""
Your first CUDA kernel: threads, blocks and the grid, on a map kernel (saxpy)
=============================================================================

What you learn here:

- how a kernel launch ``kernel[blocks, threads_per_block](...)`` starts many threads running one function, and how
  each thread finds its element from ``threadIdx``, ``blockIdx`` and ``blockDim``, or simply ``cuda.grid(1)``
  (printed, and drawn as ``thread_map.png``);
- why the grid is rounded up to whole blocks, so that every kernel needs a bounds check, and what goes wrong
  without one;
- how to check a kernel against NumPy, and how nbcoll's own kernels (``nbcoll.kernels.elementwise``) follow the
  same pattern behind one launch function per operation.

Run it with ``python tutorials/01_first_kernel.py``. It uses the GPU where there is one and Numba's CUDA
simulator everywhere else (``NBCOLL_BACKEND=cuda|sim`` chooses); on the simulator it takes a few seconds.
"""

# %%
# Set-up
# ------
#
# nbcoll chooses the backend when it is imported, so it comes before ``numba.cuda``; ``numba_cuda()`` then hands
# back the ``numba.cuda`` module of that backend: the real one on a GPU, the simulator elsewhere. The first lines
# printed name the backend the kernels below run on.

import os
import tempfile

import numpy as np

# nbcoll is imported before numba.cuda: it decides whether numba.cuda is the GPU or the simulator.
import nbcoll
from nbcoll.backend import cuda as numba_cuda
from nbcoll.backend import device_backend
from nbcoll.kernels import elementwise
from nbcoll.kernels.indexing import THREADS_PER_BLOCK, blocks_for
from nbcoll.kernels.registry import register

if nbcoll.get_backend() == "numpy":
    # This tutorial launches kernels, so it needs a device: the process's device backend (the simulator without
    # a GPU) is always available.
    print("NBCOLL_BACKEND=numpy runs NumPy instead of kernels, and this tutorial is about kernels:")
    print(f"it runs on the {device_backend()!r} backend instead.")
    nbcoll.set_backend(device_backend())

cuda = numba_cuda()
BACKEND = nbcoll.get_backend()

# Small blocks keep the simulator quick; on a GPU, 128 or 256 threads per block are both common choices.
TUTORIAL_THREADS = 128

print(f"Tutorial 01 on the {BACKEND!r} backend")
if BACKEND == "sim":
    print("  (Numba's CUDA simulator: every CUDA thread is a Python thread, so sizes stay small here)")
print()

# %%
# 1. Threads, blocks and the grid
# -------------------------------
#
# A launch ``kernel[blocks, threads_per_block](args)`` runs the kernel once per thread, in blocks:
# ``blocks * threads_per_block`` threads in all. Each thread reads where it is from built-in values::
#
#     cuda.threadIdx.x   its index inside its block        0 .. blockDim.x - 1
#     cuda.blockIdx.x    its block's index in the grid     0 .. gridDim.x - 1
#     cuda.blockDim.x    the number of threads per block
#     cuda.gridDim.x     the number of blocks
#
# and its global index, the element it works on, is ``blockIdx.x * blockDim.x + threadIdx.x``, which
# ``cuda.grid(1)`` computes for you.
#
# Why blocks: the threads of one block run on one streaming multiprocessor, where they can share fast memory and
# wait for each other (``cuda.syncthreads()``). Blocks are independent of each other, so the GPU runs them in any
# order, on as many multiprocessors as it has: the same launch scales from a small GPU to a large one.
#
# The kernel ``where_am_i`` below only records those values so that we can print them. Its arrays have one slot
# per thread, exactly ``blocks x threads_per_block``, so every thread has a slot and no bounds check is needed
# (section 2 needs one). In the table it prints, read one row per thread: ``threadIdx.x`` restarts at 0 in every
# block while ``cuda.grid(1)`` keeps counting, and the last two threads exist although there are only 10
# elements: a launch always starts whole blocks.


@register("void(int32[::1], int32[::1], int32[::1], int32[::1])")
@cuda.jit
def where_am_i(block_index, thread_index, block_size, global_index):
    # One thread writes down its own coordinates at its global index.
    i = cuda.grid(1)
    block_index[i] = cuda.blockIdx.x
    thread_index[i] = cuda.threadIdx.x
    block_size[i] = cuda.blockDim.x
    global_index[i] = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x


print("1. Threads, blocks and the grid: where_am_i[3, 4] starts 3 blocks of 4 threads")
blocks, threads = 3, 4
records = [nbcoll.zeros(blocks * threads, np.int32) for _ in range(4)]
where_am_i[blocks, threads](*records)
block_index, thread_index, block_size, global_index = (nbcoll.to_host(r) for r in records)
n_small = 10
print(f"   with {n_small} elements to compute, the last {blocks * threads - n_small} threads have nothing to do")
print("   blockIdx.x  threadIdx.x  blockDim.x  cuda.grid(1)  element")
for b, t, size, g in zip(block_index, thread_index, block_size, global_index, strict=True):
    element = f"x[{g}]" if g < n_small else "none: past the end"
    print(f"   {b:10d}  {t:11d}  {size:10d}  {g:12d}  {element}")
assert np.array_equal(global_index, np.arange(blocks * threads)), "cuda.grid(1) is blockIdx * blockDim + threadIdx"

# %%
# The thread map as a picture
# ---------------------------
#
# The same records, drawn: one cell per thread, coloured by its block and labelled with its ``threadIdx.x``, with
# the element it computes beneath it; the two threads past the end are greyed out. The tutorial prints where it
# saved the picture, ``thread_map.png``.


def draw_thread_map(block_index, thread_index, global_index, n_elements, path):
    """One cell per thread, as the kernel recorded it: coloured by its block, labelled with its threadIdx.x, and
    with the element it computes beneath; threads past the end are greyed out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = plt.get_cmap("tab10").colors
    figure, axes = plt.subplots(figsize=(0.75 * len(global_index) + 0.5, 2.3))
    for b, t, g in zip(block_index, thread_index, global_index, strict=True):
        idle = bool(g >= n_elements)
        fill = "lightgray" if idle else colours[b % 10]
        axes.add_patch(plt.Rectangle((g, 0), 0.92, 1, facecolor=fill, edgecolor="gray", hatch="//" if idle else None))
        axes.text(g + 0.46, 0.5, f"t{t}", ha="center", va="center", fontsize=10, color="black" if idle else "white")
        axes.text(g + 0.46, -0.3, "idle" if idle else f"x[{g}]", ha="center", va="center", fontsize=9)
    for b in sorted(set(block_index.tolist())):
        first, last = global_index[block_index == b].min(), global_index[block_index == b].max()
        axes.plot([first, last + 0.92], [1.12, 1.12], color=colours[b % 10], linewidth=3)
        axes.text((first + last + 0.92) / 2, 1.35, f"block {b}", ha="center", va="center", fontsize=10)
    axes.set_xlim(-0.2, len(global_index) + 0.1)
    axes.set_ylim(-0.6, 1.6)
    axes.axis("off")
    axes.set_title(
        f"kernel[{len(set(block_index.tolist()))}, {int(block_size[0])}]: which thread computes which element"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


# NBCOLL_FIGURES_DIR, when set (the docs build sets it), receives the picture and keeps it; otherwise a temporary
# folder, removed when the tutorial ends.
scratch = None if os.environ.get("NBCOLL_FIGURES_DIR") else tempfile.TemporaryDirectory(prefix="nbcoll-tutorial-01-")
figures = os.environ.get("NBCOLL_FIGURES_DIR") or scratch.name
os.makedirs(figures, exist_ok=True)
picture = draw_thread_map(block_index, thread_index, global_index, n_small, os.path.join(figures, "thread_map.png"))
print(f"   the same as a picture: {picture}")
if scratch is not None:
    print("   (removed at the end: set NBCOLL_FIGURES_DIR=DIR to keep it)")
print()

# %%
# 2. A map kernel: saxpy, ``out[i] = a * x[i] + y[i]``
# ----------------------------------------------------
#
# One thread computes one element. The number of blocks is rounded up so that every element has a thread, which
# leaves spare threads in the last block whenever ``n`` is not a multiple of the block size: the bounds check
# ``if i < out.size`` sends them home before they touch memory.
#
# The output gives the grid (3 blocks of 128 threads for 300 elements, so 84 threads idle) and the largest
# difference from NumPy's ``a * x + y``: 0 on the simulator, which rounds as NumPy does; a GPU may fuse the
# multiply and the add into one instruction that rounds once, and differ in the last bit.


@register("void(float32, float32[::1], float32[::1], float32[::1])")
@cuda.jit
def saxpy(a, x, y, out):
    # One thread computes one output element, if its index is inside the array.
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


n = 300  # deliberately not a multiple of the block size
a = np.float32(2.5)
rng = np.random.default_rng(0)
x_host = rng.standard_normal(n).astype(np.float32)
y_host = rng.standard_normal(n).astype(np.float32)

x, y = nbcoll.to_device(x_host), nbcoll.to_device(y_host)
out = nbcoll.empty(n, np.float32)
saxpy_blocks = (n + TUTORIAL_THREADS - 1) // TUTORIAL_THREADS  # round up: ceil(n / threads)
saxpy[saxpy_blocks, TUTORIAL_THREADS](a, x, y, out)

expected = a * x_host + y_host
error = float(np.max(np.abs(nbcoll.to_host(out) - expected)))
print(f"2. saxpy on {n} elements: {saxpy_blocks} blocks x {TUTORIAL_THREADS} threads")
print(f"   = {saxpy_blocks * TUTORIAL_THREADS} threads for {n} elements; {saxpy_blocks * TUTORIAL_THREADS - n} idle")
print(f"   max |kernel - NumPy| = {error:.3g}")
assert error <= 1e-6 * float(np.max(np.abs(expected))), "saxpy disagrees with NumPy"
print("   saxpy matches NumPy")
print()

# %%
# 3. The same kernel without the bounds check
# -------------------------------------------
#
# The idle threads of the last block now compute indices past the end of the arrays. On a GPU nothing stops
# them: they read whatever lies beyond the array and write over it, silently, so results elsewhere go wrong
# much later. The simulator checks every access and raises ``IndexError``, naming the thread (``tid``, its
# ``threadIdx``) and the block (``ctaid``, its ``blockIdx``). Look for ``ctaid=[2, 0, 0]``: only the last block
# has threads past the end, its threads 44 to 127 (2 x 128 + 44 = 300), and the simulator names the first that
# fails. (On a GPU this section launches nothing and says so.)


@register("void(float32, float32[::1], float32[::1], float32[::1])")
@cuda.jit
def saxpy_without_bounds_check(a, x, y, out):
    # One thread computes one output element, even when its index is past the end: the bug this section shows.
    i = cuda.grid(1)
    out[i] = a * x[i] + y[i]


print("3. saxpy without the bounds check")
if BACKEND == "sim":
    try:
        saxpy_without_bounds_check[saxpy_blocks, TUTORIAL_THREADS](a, x, y, out)
        print("   no error?! every thread had an element")
    except IndexError as error_from_the_simulator:
        print("   the simulator raised IndexError:")
        print(f"   {error_from_the_simulator}")
else:
    print("   not launched on a real GPU: the threads past the end would overwrite memory silently.")
    print("   Run with NBCOLL_BACKEND=sim to see the simulator catch it as an IndexError.")
print()

# %%
# 4. nbcoll's own kernels
# -----------------------
#
# nbcoll wraps each kernel in a launch function that checks its arguments, allocates the output, computes the
# grid and, on the numpy backend, runs the NumPy reference instead. ``elementwise.unary`` and
# ``elementwise.binary`` are the map and zip kernels; they launch ``THREADS_PER_BLOCK`` threads per block through
# ``indexing.blocks_for``. Here ``unary`` computes a relu, and two ``binary`` launches compute saxpy again: a
# ``mul`` by a one-element array holding ``a`` (broadcast along ``x``), then an ``add``. The last line shows their
# grid for the same 300 elements: fewer, larger blocks than section 2's.

print("4. nbcoll.kernels.elementwise: the same pattern behind one launch function per operation")
relu = nbcoll.to_host(elementwise.unary("relu", x))
assert np.array_equal(relu, elementwise.unary_reference("relu", x_host))
print(f"   unary('relu', x): {n} elements, matches unary_reference")

scale = nbcoll.to_device(np.full(1, a, dtype=np.float32))  # shape (1,) broadcasts along x
scaled = elementwise.binary("mul", x, scale)  # a device array: it can feed the next launch without a copy
summed = nbcoll.to_host(elementwise.binary("add", scaled, y))
assert np.allclose(summed, expected, rtol=1e-6, atol=1e-6)
print("   binary('add', binary('mul', x, a), y): saxpy from two launches, matches NumPy")

nbcoll_blocks = blocks_for(n)
print(
    f"   grid: blocks_for({n}) = {nbcoll_blocks} blocks x {THREADS_PER_BLOCK} threads = "
    f"{nbcoll_blocks * THREADS_PER_BLOCK} threads, {nbcoll_blocks * THREADS_PER_BLOCK - n} idle"
)
print()

# %%
# 5. Grid geometry for a few sizes
# --------------------------------
#
# ``blocks_for(n)`` rounds ``n / THREADS_PER_BLOCK`` up. In the table, look at 256 and 257: one element more
# than a multiple of the block size costs a whole block more, 255 threads of it idle. At a million elements the
# idle threads are a tiny fraction of the grid.

print(f"5. Grid geometry with {THREADS_PER_BLOCK} threads per block")
print("          n  blocks  threads  idle threads")
for size in (1, 255, 256, 257, 1000, 1_000_000):
    grid_blocks = blocks_for(size)
    total = grid_blocks * THREADS_PER_BLOCK
    print(f"   {size:8d}  {grid_blocks:6d}  {total:7d}  {total - size:12d}")
print()
print("Try it yourself: python -m nbcoll exercise map_kernel")
print("Done: every kernel matched NumPy.")
