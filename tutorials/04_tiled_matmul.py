"""
Matrix multiplication: naive, then tiled in shared memory, with the memory traffic of each counted
==================================================================================================

What you learn here:

- the naive kernel: one thread per output element, each reading a whole row of A and a whole column of B from
  global memory, so every element of A is read N times and every element of B M times: ``2*M*N*K`` loads;
- the tiled kernel: a block of TILE x TILE threads stages a TILE x TILE tile of A and one of B in shared memory,
  step by step along K, and every staged element is then used TILE times from there: about
  ``M*K*ceil(N/TILE) + K*N*ceil(M/TILE)`` loads, TILE times fewer;
- why two ``cuda.syncthreads()`` per step: one before the tiles are read, one before they are overwritten;
- how to check such a count: the kernels here also count their own loads, and the counts equal the formulas.

Run it with ``python tutorials/04_tiled_matmul.py``. It uses the GPU where there is one and Numba's CUDA
simulator everywhere else (``NBCOLL_BACKEND=cuda|sim`` chooses). On the simulator the times measure Python
threads, not a GPU: read the counts, which are the same on both.
"""

# %%
# Set-up
# ------
#
# The matrices are ``(M x K) @ (K x N)``, small on the simulator and about a thousand on a side on a GPU, and on
# purpose not multiples of the tile side. Both kernels below launch the same grid: one thread per output
# element, in blocks of ``TILE x TILE``, so ``grid`` has ``ceil(N / TILE)`` blocks across and ``ceil(M / TILE)``
# down. The first line printed gives the sizes.

import math
import time

import numpy as np

# nbcoll is imported before numba.cuda: it decides whether numba.cuda is the GPU or the simulator.
import nbcoll
from nbcoll.backend import cuda as numba_cuda
from nbcoll.backend import device_backend
from nbcoll.kernels import matmul as matmul_kernels
from nbcoll.kernels.registry import register

if nbcoll.get_backend() == "numpy":
    # This tutorial launches kernels, so it needs a device: the simulator is always there.
    print("NBCOLL_BACKEND=numpy runs NumPy instead of kernels, and this tutorial is about kernels:")
    print(f"it runs on the {device_backend()!r} backend instead.")
    nbcoll.set_backend(device_backend())

cuda = numba_cuda()
BACKEND = nbcoll.get_backend()

TUTORIAL_TILE = 16
"""Side of the shared-memory tiles, as in nbcoll.kernels.matmul (a compile-time constant of the kernel)."""
assert TUTORIAL_TILE == matmul_kernels.TILE

# Not multiples of the tile, so the edge tiles are ragged, and K spans three tile steps (16 + 16 + 8).
M, K, N = (20, 40, 24) if BACKEND == "sim" else (1000, 1040, 1020)

print(f"Tutorial 04 on the {BACKEND!r} backend: ({M} x {K}) @ ({K} x {N}) in float32, TILE = {TUTORIAL_TILE}")
if BACKEND == "sim":
    print("  (Numba's CUDA simulator: every CUDA thread is a Python thread, so sizes stay small here)")
print()

rng = np.random.default_rng(0)
a_host = rng.standard_normal((M, K)).astype(np.float32)
b_host = rng.standard_normal((K, N)).astype(np.float32)
expected = a_host.astype(np.float64) @ b_host.astype(np.float64)
a, b = nbcoll.to_device(a_host), nbcoll.to_device(b_host)
grid = (math.ceil(N / TUTORIAL_TILE), math.ceil(M / TUTORIAL_TILE))
threads = (TUTORIAL_TILE, TUTORIAL_TILE)

# %%
# Helpers
# -------
#
# The two load counts as formulas, which sections 1 and 2 compare with what the kernels count; a check of a
# result against NumPy's product (computed in float64); and a timer on the host clock, for section 3.


def naive_loads(m: int, k: int, n: int) -> int:
    """Each of the m*n threads reads k elements of A and k of B."""
    return 2 * m * n * k


def tiled_loads(m: int, k: int, n: int, tile: int = TUTORIAL_TILE) -> int:
    """Every element of A is staged once per column of blocks, every element of B once per row of blocks.

    Zeros padding the ragged edges are written into the tiles without a load, so they are not counted.
    """
    return m * k * math.ceil(n / tile) + k * n * math.ceil(m / tile)


def check(name: str, result: np.ndarray) -> float:
    error = float(np.max(np.abs(result - expected)))
    assert error <= 1e-4 * K, f"{name} disagrees with NumPy"
    return error


def timed(launch) -> tuple[np.ndarray, float]:
    """Run ``launch`` on the host clock, after a first run that compiles it on a GPU; return (result, seconds)."""
    if BACKEND == "cuda":
        launch()
        cuda.synchronize()
    start = time.perf_counter()
    result = launch()
    cuda.synchronize()
    return nbcoll.to_host(result), time.perf_counter() - start


# %%
# 1. The naive kernel: one thread per output element
# --------------------------------------------------
#
# Thread ``(row, col)`` walks ``k = 0 .. K-1`` and reads ``a[row, k]`` and ``b[k, col]`` from global memory each
# time. Neighbouring threads read the same row of A and neighbouring columns of B, but each thread fetches its
# own copy: nothing is shared. This version also counts its loads, ``2 * K`` per thread, and adds them to
# ``loads[0]`` once at the end. The output compares that count with the formula ``2*M*N*K``: they are equal.


@register("void(float32[:, ::1], float32[:, ::1], float32[:, ::1], int64[::1])")
@cuda.jit
def naive_matmul_counted(a, b, out, loads):
    # One thread computes one output element from a row of a and a column of b, all read from global memory.
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        acc = np.float32(0)
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]
        out[row, col] = acc
        cuda.atomic.add(loads, 0, 2 * a.shape[1])


def run_naive_counted():
    out = nbcoll.empty((M, N), np.float32)
    loads = nbcoll.zeros(1, np.int64)
    naive_matmul_counted[grid, threads](a, b, out, loads)
    return out, int(nbcoll.to_host(loads)[0])


print(f"1. Naive: {grid[0] * grid[1]} blocks of {TUTORIAL_TILE} x {TUTORIAL_TILE} threads, one per output element")
out, counted = run_naive_counted()
error = check("naive_matmul_counted", nbcoll.to_host(out))
print(f"   max |kernel - NumPy| = {error:.2g}")
print(f"   global loads: counted {counted}, formula 2*M*N*K = {naive_loads(M, K, N)}")
assert counted == naive_loads(M, K, N)
print()

# %%
# 2. The tiled kernel: stage tiles in shared memory, use each staged element TILE times
# -------------------------------------------------------------------------------------
#
# Block ``(bx, by)`` owns the output tile of rows ``by*TILE ..`` and columns ``bx*TILE ..``. It walks K in steps
# of TILE; at each step every thread copies ONE element of A and ONE of B into the shared tiles (zero past the
# edges), then every thread multiplies its row of the A tile by its column of the B tile: TILE multiply-adds per
# load pair. In pseudocode::
#
#     for step in range(ceil(K / TILE)):
#         a_tile[ty, tx] = a[row, step*TILE + tx]        # one coalesced load per thread
#         b_tile[ty, tx] = b[step*TILE + ty, col]
#         syncthreads()                                   # the tiles are complete
#         acc += sum(a_tile[ty, :] * b_tile[:, tx])       # TILE products from shared memory
#         syncthreads()                                   # everyone is done before the next step overwrites
#
# Without the first ``syncthreads`` a fast thread would read slots that slow threads have not written yet;
# without the second it could overwrite a tile another thread is still reading. Both bugs give wrong sums,
# silently.
#
# The output gives the shared memory each block needs, then the counted loads against the formula, and how many
# times fewer they are than the naive kernel's: close to TILE, less here because the ragged edge tiles are
# partly padding.


@register("void(float32[:, ::1], float32[:, ::1], float32[:, ::1], int64[::1])")
@cuda.jit
def tiled_matmul_counted(a, b, out, loads):
    # One thread computes one output element; its block stages tiles of a and b in shared memory, step by step.
    a_tile = cuda.shared.array((TUTORIAL_TILE, TUTORIAL_TILE), np.float32)
    b_tile = cuda.shared.array((TUTORIAL_TILE, TUTORIAL_TILE), np.float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TUTORIAL_TILE + ty
    col = cuda.blockIdx.x * TUTORIAL_TILE + tx
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    acc = np.float32(0)
    my_loads = 0
    for step in range((k + TUTORIAL_TILE - 1) // TUTORIAL_TILE):
        a_col = step * TUTORIAL_TILE + tx
        if row < m and a_col < k:
            a_tile[ty, tx] = a[row, a_col]
            my_loads += 1
        else:
            a_tile[ty, tx] = 0
        b_row = step * TUTORIAL_TILE + ty
        if b_row < k and col < n:
            b_tile[ty, tx] = b[b_row, col]
            my_loads += 1
        else:
            b_tile[ty, tx] = 0
        cuda.syncthreads()
        for j in range(TUTORIAL_TILE):
            acc += a_tile[ty, j] * b_tile[j, tx]
        cuda.syncthreads()
    if row < m and col < n:
        out[row, col] = acc
    cuda.atomic.add(loads, 0, my_loads)


def run_tiled_counted():
    out = nbcoll.empty((M, N), np.float32)
    loads = nbcoll.zeros(1, np.int64)
    tiled_matmul_counted[grid, threads](a, b, out, loads)
    return out, int(nbcoll.to_host(loads)[0])


print(f"2. Tiled: the same grid, {math.ceil(K / TUTORIAL_TILE)} tile steps along K per block")
shared_bytes = 2 * TUTORIAL_TILE * TUTORIAL_TILE * 4
print(f"   shared memory per block: 2 tiles x {TUTORIAL_TILE} x {TUTORIAL_TILE} x 4 bytes = {shared_bytes} bytes")
out, counted = run_tiled_counted()
error = check("tiled_matmul_counted", nbcoll.to_host(out))
print(f"   max |kernel - NumPy| = {error:.2g}")
formula = tiled_loads(M, K, N)
print(f"   global loads: counted {counted}, formula M*K*ceil(N/TILE) + K*N*ceil(M/TILE) = {formula}")
assert counted == formula
print(f"   {naive_loads(M, K, N) / formula:.1f}x fewer loads than the naive kernel")
print()

# %%
# 3. nbcoll's kernels, timed on the host clock
# --------------------------------------------
#
# ``nbcoll.kernels.matmul`` holds the same two kernels without the counters: ``matmul_naive`` (2-D only) and
# ``matmul`` (NumPy's ``@``, with batch broadcasting, every dtype, float16 accumulating in float32). Each line
# gives a kernel's time, its global loads from the formulas, and its largest error against NumPy. On a GPU the
# times show what those loads cost; on the simulator they measure Python threads instead, as the output says.

print("3. nbcoll.kernels.matmul on the host clock")
for name, function in [("matmul_naive", matmul_kernels.matmul_naive), ("matmul (tiled)", matmul_kernels.matmul)]:
    result, seconds = timed(lambda function=function: function(a, b))
    error = check(name, result)
    loads = naive_loads(M, K, N) if "naive" in name else tiled_loads(M, K, N)
    print(f"   {name:15s} {seconds * 1e3:9.2f} ms   {loads:12d} global loads   max error {error:.2g}")
if BACKEND == "sim":
    print("   (simulator times measure Python threads and their syncthreads barriers, not memory traffic)")
print()

# %%
# 4. The counts at the sizes where they matter
# --------------------------------------------
#
# For square matrices the ratio tends to TILE: a tile of side T turns T loads into T*T multiply-adds. Larger
# tiles save more loads but need more shared memory and registers per block; 16 or 32 is common. The table uses
# the formulas only, no kernel: at 4096 x 4096 the naive kernel would read 512 GiB from global memory, the tiled
# one 32 GiB.

print("4. Global loads (float32, 4 bytes each) for square n x n matrices")
print("        n      naive loads    tiled loads   ratio   naive traffic   tiled traffic")
for size in (64, 256, 1024, 4096):
    naive, tiled = naive_loads(size, size, size), tiled_loads(size, size, size)
    print(
        f"   {size:6d}  {naive:15d}  {tiled:13d}  {naive / tiled:6.1f}  "
        f"{naive * 4 / 2**30:11.3f} GiB  {tiled * 4 / 2**30:11.3f} GiB"
    )
print()
print("Try it yourself, with 4 x 4 tiles: python -m nbcoll exercise tiled_matmul")
print("Done: every kernel matched NumPy and every count matched its formula.")
