"""
Communication patterns: map, gather, scatter, stencil and transpose, with shared memory and atomics
===================================================================================================

Every parallel kernel is defined by which elements each thread reads and which it writes. Five patterns cover
most of deep learning's kernels, and each has its own hazard and its own tool:

==========  ==============================  ==============================  =====================================
pattern     thread i reads                  thread i writes                 hazard, and the tool that answers it
==========  ==============================  ==============================  =====================================
map         x[i]                            out[i]                          none
gather      x[index[i]] (anywhere)          out[i]                          scattered reads (slow, but safe)
scatter     x[i]                            out[index[i]] (anywhere)        two threads, one place: atomics
stencil     x[i - r .. i + r]               out[i]                          neighbours read again and again:
                                                                            a shared-memory tile with a halo
transpose   x[i, j]                         out[j, i]                       strided reads or writes: a shared-
                                                                            memory tile turned around
==========  ==============================  ==============================  =====================================

What you learn here:

- gather versus scatter, and why scatter needs ``cuda.atomic.add`` (a lost update shown in slow motion);
- shared memory (``cuda.shared.array``) and the barrier ``cuda.syncthreads()`` that makes it safe to share;
- the halo a stencil tile needs, and how much global-memory traffic the tile saves;
- how nbcoll's kernels (``nbcoll.kernels.index``, ``stencil``, ``transpose``) package the same patterns.

Run it with ``python tutorials/02_communication_patterns.py``. It uses the GPU where there is one and Numba's CUDA
simulator everywhere else (``NBCOLL_BACKEND=cuda|sim`` chooses); on the simulator it takes a few seconds.
"""

# %%
# Set-up
# ------
#
# nbcoll is imported first, as in tutorial 01, so that ``numba.cuda`` is the GPU or the simulator. The constants
# fix the geometry of this tutorial's own kernels: blocks of ``THREADS`` threads, and for the stencil of section
# 4 a ``RADIUS`` of 1, so a block's shared tile holds ``HALO_TILE = THREADS + 2`` values.

import numpy as np

# nbcoll is imported before numba.cuda: it decides whether numba.cuda is the GPU or the simulator.
import nbcoll
from nbcoll.backend import cuda as numba_cuda
from nbcoll.backend import device_backend
from nbcoll.kernels import elementwise, index, stencil
from nbcoll.kernels.registry import register
from nbcoll.kernels.transpose import TILE_DIM, permute, transpose

if nbcoll.get_backend() == "numpy":
    # This tutorial launches kernels, so it needs a device: the process's device backend (the simulator without
    # a GPU) is always available.
    print("NBCOLL_BACKEND=numpy runs NumPy instead of kernels, and this tutorial is about kernels:")
    print(f"it runs on the {device_backend()!r} backend instead.")
    nbcoll.set_backend(device_backend())

cuda = numba_cuda()
BACKEND = nbcoll.get_backend()

# Threads per block of the tutorial's own kernels: small, so that the simulator stays quick.
THREADS = 32
# The moving average of section 4 reads RADIUS neighbours on each side of every element.
RADIUS = 1
HALO_TILE = THREADS + 2 * RADIUS

rng = np.random.default_rng(2)

print(f"Tutorial 02 on the {BACKEND!r} backend")
if BACKEND == "sim":
    print("  (Numba's CUDA simulator: every CUDA thread is a Python thread, so sizes stay small here)")
print()

# %%
# 1. Map: thread ``i`` reads ``x[i]`` and writes ``out[i]``
# ---------------------------------------------------------
#
# No two threads touch the same element, so there is nothing to coordinate: this is the pattern of tutorial 01,
# and of every elementwise op. Consecutive threads touch consecutive addresses, which the GPU merges into few
# wide memory transactions ("coalescing"): map kernels run at full memory bandwidth. Here nbcoll's relu kernel
# maps 50 values, and the check against ``np.maximum(x, 0)`` passes.

print("1. Map: out[i] = relu(x[i])")
x_host = rng.standard_normal(50).astype(np.float32)
relu = nbcoll.to_host(elementwise.unary("relu", nbcoll.to_device(x_host)))
assert np.array_equal(relu, np.maximum(x_host, 0))
print("   50 threads, each reads one element and writes one: matches NumPy")
print()

# %%
# 2. Gather: thread ``i`` writes ``out[i]``, reading from where another array points
# ----------------------------------------------------------------------------------
#
# Each thread still writes only its own output, so gathers are always safe. The reads land anywhere, and
# scattered reads are slower than consecutive ones, but the result never depends on the order of the threads.
# In the output, ``idx`` names index 3 three times: three threads read the same element, which is fine.
#
# An embedding lookup is a gather of whole rows: ``index.embedding`` turns ids of shape ``(2, 3)`` into rows of
# shape ``(2, 3, 4)``, one row of the weight per id.


@register("void(float32[::1], int64[::1], float32[::1])")
@cuda.jit
def gather_kernel(table, idx, out):
    # One thread fetches one element from wherever idx points.
    i = cuda.grid(1)
    if i < out.size:
        out[i] = table[idx[i]]


print("2. Gather: out[i] = table[idx[i]]")
table_host = np.arange(10, dtype=np.float32) * 10
idx_host = np.array([3, 3, 0, 9, 5, 3, 1], dtype=np.int64)
gathered = nbcoll.empty(idx_host.size, np.float32)
gather_kernel[1, THREADS](nbcoll.to_device(table_host), nbcoll.to_device(idx_host), gathered)
print(f"   idx = {idx_host.tolist()}  ->  out = {nbcoll.to_host(gathered).astype(int).tolist()}")
assert np.array_equal(nbcoll.to_host(gathered), table_host[idx_host])

weight = rng.standard_normal((6, 4)).astype(np.float32)
ids = np.array([[1, 5, 1], [0, 2, 2]], dtype=np.int64)
rows = nbcoll.to_host(index.embedding(nbcoll.to_device(weight), nbcoll.to_device(ids)))
assert np.array_equal(rows, weight[ids])
print(f"   index.embedding(weight {weight.shape}, ids {ids.shape}) -> {rows.shape}: weight[ids], matches NumPy")
print()

# %%
# 3. Scatter: thread ``i`` reads its own element, writing to where another array points
# -------------------------------------------------------------------------------------
#
# When two threads write the same place, nothing orders them. For a plain store one of them wins; for an
# update such as ``counts[b] += 1`` it is worse: the update is a read, an add and a write, and two threads that
# both read before either writes both write ``old + 1``. One increment is lost.
#
# On a GPU that interleaving is common; the simulator runs its threads one Python step at a time and rarely
# shows it. So the kernel ``histogram_lost_updates`` shows the race in slow motion: a barrier between the read
# and the write makes every thread of the block read before any thread writes, the worst interleaving, every
# time. ``histogram_atomic`` makes each update one indivisible ``cuda.atomic.add``.
#
# Compare the three lines of counts: the racy kernel says 1 in every bin that got any value at all, and the
# atomic one matches the expected histogram. The last line is the backward pass of section 2's embedding, a
# scatter: ids 1 and 2 appear twice each in ``ids``, so their rows of ``dweight`` sum two gradients of ones,
# and ids 3 and 4, which never appear, get none.


@register("void(int64[::1], int32[::1])")
@cuda.jit
def histogram_lost_updates(bins, counts):
    # One thread counts one value, with a read-add-write that a barrier pulls apart: the race, made visible.
    i = cuda.grid(1)
    old = 0
    if i < bins.size:
        old = counts[bins[i]]
    cuda.syncthreads()  # every thread has read; now all of them write
    if i < bins.size:
        counts[bins[i]] = old + 1


@register("void(int64[::1], int32[::1])")
@cuda.jit
def histogram_atomic(bins, counts):
    # One thread counts one value; the atomic add makes each read-add-write indivisible.
    i = cuda.grid(1)
    if i < bins.size:
        cuda.atomic.add(counts, bins[i], 1)


print("3. Scatter: counts[bins[i]] += 1, a histogram of 24 values in 4 bins")
bins_host = rng.integers(0, 4, size=24)
expected_counts = np.bincount(bins_host, minlength=4)
bins = nbcoll.to_device(bins_host)
racy = nbcoll.zeros(4, np.int32)
histogram_lost_updates[1, THREADS](bins, racy)
atomic = nbcoll.zeros(4, np.int32)
histogram_atomic[1, THREADS](bins, atomic)
print(f"   expected              {expected_counts.tolist()}")
print(f"   plain read-add-write  {nbcoll.to_host(racy).tolist()}  (every thread read 0, so every bin says 1)")
print(f"   cuda.atomic.add       {nbcoll.to_host(atomic).tolist()}")
assert np.array_equal(nbcoll.to_host(racy), (expected_counts > 0).astype(np.int32))
assert np.array_equal(nbcoll.to_host(atomic), expected_counts)

# The backward pass of an embedding is the scatter of section 2's gather: duplicate ids sum their gradients.
grad_rows = np.ones(ids.shape + (4,), np.float32)
dweight = nbcoll.to_host(index.embedding_backward(nbcoll.to_device(grad_rows), nbcoll.to_device(ids), 6))
print(f"   index.embedding_backward: row r of dweight sums the gradients of id r: {dweight[:, 0].astype(int).tolist()}")
assert np.array_equal(dweight[:, 0], np.bincount(ids.ravel(), minlength=6))
print()

# %%
# 4. Stencil: thread ``i`` writes ``out[i]`` from ``x[i - RADIUS .. i + RADIUS]``
# -------------------------------------------------------------------------------
#
# Neighbouring threads read overlapping windows, so a direct kernel reads every input ``2 * RADIUS + 1`` times
# from global memory. Shared memory is a small, fast memory that the threads of one block share: the block copies
# the inputs it needs into it once, waits at a barrier until every copy is done, then computes from the copies.
# The block's outputs need its own ``THREADS`` inputs plus ``RADIUS`` more on each side: the halo.
#
# The output counts the global-memory reads both ways: 3 per output element read directly, against one per
# tile slot (the last block's tile is cut short at the end of ``x``). ``stencil.conv2d`` is the same idea in
# 2-D: a block computes a square of outputs, and its tile takes ``K - 1`` more rows below and ``K - 1`` more
# columns to the right for a ``K x K`` filter, the halo of a window that starts at its output.


@register("void(float32[::1], float32[::1])")
@cuda.jit
def moving_average_tiled(x, out):
    # One thread averages one window. The block first stages its tile and halo in shared memory.
    tile = cuda.shared.array(HALO_TILE, np.float32)
    t = cuda.threadIdx.x
    start = cuda.blockIdx.x * THREADS  # out[start] is the average of x[start .. start + 2 * RADIUS]
    for j in range(t, HALO_TILE, THREADS):  # HALO_TILE > THREADS: some threads copy two inputs
        if start + j < x.size:
            tile[j] = x[start + j]
    cuda.syncthreads()  # without it a thread could read a tile slot that its neighbour has not written yet
    i = start + t
    if i < out.size:
        total = tile[t]
        for k in range(1, 2 * RADIUS + 1):
            total += tile[t + k]
        out[i] = total / (2 * RADIUS + 1)


n = 70
signal = rng.standard_normal(n).astype(np.float32)
n_out = n - 2 * RADIUS
averaged = nbcoll.empty(n_out, np.float32)
stencil_blocks = (n_out + THREADS - 1) // THREADS
moving_average_tiled[stencil_blocks, THREADS](nbcoll.to_device(signal), averaged)
expected_average = np.convolve(signal, np.ones(2 * RADIUS + 1) / (2 * RADIUS + 1), "valid")
assert np.allclose(nbcoll.to_host(averaged), expected_average, atol=1e-6)
direct_reads = n_out * (2 * RADIUS + 1)
tiled_reads = sum(min(HALO_TILE, n - b * THREADS) for b in range(stencil_blocks))
print(f"4. Stencil: a {2 * RADIUS + 1}-point moving average of {n} values, {stencil_blocks} blocks of {THREADS}")
print(f"   global reads: {direct_reads} reading every window directly, {tiled_reads} through the shared tiles")
print("   moving_average_tiled matches NumPy")

image = rng.integers(0, 10, size=(12, 11)).astype(np.float32)
box = np.ones((3, 3), np.float32)
blurred = nbcoll.to_host(stencil.conv2d(nbcoll.to_device(image), nbcoll.to_device(box)))
windows = np.lib.stride_tricks.sliding_window_view(image, (3, 3)).sum(axis=(2, 3))
assert np.array_equal(blurred, windows)
print(f"   stencil.conv2d(image {image.shape}, 3x3 box) -> {blurred.shape}: matches NumPy")
print(f"   (the same idea in 2-D, with tiles of {stencil.TILE_2D}x{stencil.TILE_2D} outputs)")
print()

# %%
# 5. Transpose: thread ``(i, j)`` reads ``x[i, j]`` and writes ``out[j, i]``
# --------------------------------------------------------------------------
#
# Row-major storage puts ``x[i, j]`` and ``x[i, j + 1]`` side by side, but ``out[j, i]`` and ``out[j + 1, i]`` a
# whole row apart. A direct copy therefore reads consecutively and writes with a stride (or the reverse), and
# strided accesses waste most of every memory transaction. ``transpose.permute`` reads a ``TILE_DIM x TILE_DIM``
# tile with consecutive threads on consecutive columns, parks it in shared memory, and writes it out turned
# around: both the reads and the writes of global memory are consecutive; only the shared-memory accesses are
# strided, and those are cheap.
#
# The shapes here, 35 x 33, are not multiples of the tile, so the edge tiles are partly empty; the second check
# swaps two middle axes of a 4-D array, as attention does when it splits heads.

print(f"5. Transpose through {TILE_DIM}x{TILE_DIM} shared-memory tiles")
matrix = rng.standard_normal((35, 33)).astype(np.float32)
turned = nbcoll.to_host(transpose(nbcoll.to_device(matrix)))
assert np.array_equal(turned, matrix.T)
print(f"   transpose(x {matrix.shape}) -> {turned.shape}: matches x.T")
heads = rng.standard_normal((2, 3, 2, 4)).astype(np.float32)
split_heads = nbcoll.to_host(permute(nbcoll.to_device(heads), (0, 2, 1, 3)))
assert np.array_equal(split_heads, heads.transpose(0, 2, 1, 3))
print(f"   permute(x {heads.shape}, (0, 2, 1, 3)) -> {split_heads.shape}: matches np.transpose")
print()
print("Try it yourself: python -m nbcoll exercise stencil_2d, then python -m nbcoll exercise scatter_add")
print("Done: every pattern matched NumPy.")
