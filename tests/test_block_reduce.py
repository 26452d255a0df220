"""The one block-wide tree reduction every shared-memory fold uses, and the one dispatch between kernel and reference.

The kernels here exist only to drive the device functions with odd row lengths (0, 1, not a power of two); the
kernels of nbcoll that use them are checked against their references in their own test files.
"""

import numba
import numpy as np
import pytest
from numba import cuda

import nbcoll
from nbcoll.backend import device_backend
from nbcoll.kernels.block_reduce import add, block_max, block_sum, make_block_reduce, merge_values
from nbcoll.kernels.dispatch import dispatch, fill_out

DEVICE = device_backend()
WIDTH, ROWS = 8, 4
SLOTS = WIDTH * ROWS  # a shared array's size must be a constant when compiled for a GPU, not an expression

fold_sum = make_block_reduce(merge_values(add))


@cuda.jit
def row_sums_kernel(x, counts, out):
    # Thread (lane, row) gives x[row, lane] when lane < counts[row]; the lanes of each row fold their slots.
    scratch = cuda.shared.array(SLOTS, numba.int64)
    lane, row = cuda.threadIdx.x, cuda.threadIdx.y
    first = row * cuda.blockDim.x
    if lane < counts[row]:
        scratch[first + lane] = x[row, lane]
    fold_sum(scratch, first, lane, cuda.blockDim.x, counts[row])
    if lane == 0 and counts[row] > 0:
        out[row] = scratch[first]


@cuda.jit
def totals_kernel(x, sums, largest):
    # Every thread gives x[t] and receives the block's sum and maximum.
    scratch = cuda.shared.array(32, numba.float64)
    t = cuda.threadIdx.x
    sums[t] = block_sum(scratch, x[t])
    largest[t] = block_max(scratch, x[t])


@pytest.mark.parametrize("counts", [(0, 1, 5, 8), (3, 7, 2, 6)], ids=["0-1-5-8", "3-7-2-6"])
def test_fold_sums_only_the_first_count_lanes_of_each_row(rng, counts):
    x = rng.integers(-100, 100, size=(ROWS, WIDTH)).astype(np.int64)
    out = np.full(ROWS, -1, np.int64)
    with nbcoll.use_backend(DEVICE):
        d_out = nbcoll.to_device(out)
        row_sums_kernel[1, (WIDTH, ROWS)](nbcoll.to_device(x), nbcoll.to_device(np.array(counts)), d_out)
        got = nbcoll.to_host(d_out)
    expected = [x[r, :c].sum() if c else -1 for r, c in enumerate(counts)]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("threads", [1, 4, 32])
def test_every_thread_gets_the_block_total(rng, threads):
    x = rng.standard_normal(threads)
    with nbcoll.use_backend(DEVICE):
        sums, largest = nbcoll.zeros(threads, np.float64), nbcoll.zeros(threads, np.float64)
        totals_kernel[1, threads](nbcoll.to_device(x), sums, largest)
        np.testing.assert_allclose(nbcoll.to_host(sums), np.full(threads, x.sum()), rtol=1e-12)
        np.testing.assert_array_equal(nbcoll.to_host(largest), np.full(threads, x.max()))


def _double_reference(x):
    return x * 2


@dispatch(reference=_double_reference)
def _double(x):
    return "launched"


def test_dispatch_runs_the_reference_on_numpy_and_the_launch_elsewhere():
    x = np.arange(3)
    with nbcoll.use_backend("numpy"):
        np.testing.assert_array_equal(_double(x), [0, 2, 4])
    with nbcoll.use_backend(DEVICE):
        assert _double(x) == "launched"
    assert _double.reference is _double_reference and _double.launch(x) == "launched"
    assert _double.__name__ == "_double"


def test_fill_out_writes_the_reference_result_into_the_last_argument():
    out = np.zeros(3)
    assert fill_out(_double_reference)(np.arange(3.0), out) is out
    np.testing.assert_array_equal(out, [0, 2, 4])
