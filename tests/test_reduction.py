"""reduce_all against NumPy: integer sums wrap exactly, max and min are exact, float sums agree to rounding.

Float tolerances: the kernel adds in a tree, NumPy pairwise, so float sums differ by rounding only. The error of
either order is bounded by about ``n * eps * sum(|x|)``; the tests allow ``rtol``-like slack of 1e-12 (float64)
and 1e-5 (float32) of ``sum(|x|)``, and for float16 (accumulated in float32, rounded once at the end) one
float16 rounding: 1e-3 of ``sum(|x|)``.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import reduction as rd

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

DTYPES = [dt.name for dt in nbcoll.DTYPES]
SLACK = {"float16": 1e-3, "float32": 1e-5, "float64": 1e-12}


def sizes_for(backend):
    # 257 elements: three blocks of THREADS = 128 threads, then a second launch folds the three partials.
    return [1, 31, 257] + ([100_003] if backend == "numpy" else [])


def sample(rng, dtype, n):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dtype)
        values[: min(n, 2)] = [info.max, info.max][: min(n, 2)]  # the sum wraps around at once
        return values
    return (rng.standard_normal(n) * 10).astype(dtype)


def check_against_numpy(op, host, got):
    dtype = host.dtype
    assert type(got) is dtype.type, f"expected a NumPy {dtype} scalar, got {type(got)}"
    if op == "max":
        assert got == host.max()
    elif op == "min":
        assert got == host.min()
    elif dtype.kind in "iu":
        assert got == host.sum(dtype=dtype)
    else:
        wide = host.astype(np.float64)
        assert abs(float(got) - wide.sum()) <= SLACK[dtype.name] * np.abs(wide).sum()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", rd.REDUCTION_OPS)
def test_reduce_all_matches_numpy_for_every_op_and_dtype(backend, rng, op, dtype):
    for n in sizes_for(backend):
        host = sample(rng, dtype, n)
        check_against_numpy(op, host, rd.reduce_all(op, nbcoll.to_device(host)))


@pytest.mark.parametrize("dtype", ["int8", "uint64", "float32"])
def test_max_and_min_find_the_dtype_limits_anywhere(backend, dtype):
    dtype = np.dtype(dtype)
    lowest, highest = rd.identity("min", dtype), rd.identity("max", dtype)  # max's identity is the lowest value
    if dtype.kind == "f":
        lowest, highest = np.finfo(dtype).max, np.finfo(dtype).min
    values = np.full(100, dtype.type(7))  # one block: the tree itself must carry the limits to thread 0
    values[77], values[99] = highest, lowest
    x = nbcoll.to_device(values)
    assert rd.reduce_all("max", x) == values.max() and rd.reduce_all("min", x) == values.min()


def test_integer_sums_wrap_like_numpy_and_float16_accumulates_in_float32(backend):
    ints = np.full(200, 127, np.int8)
    assert rd.reduce_all("sum", nbcoll.to_device(ints)) == ints.sum(dtype=np.int8) == np.int8(56)
    big = np.full(3, 2**63, np.uint64)
    assert rd.reduce_all("sum", nbcoll.to_device(big)) == np.uint64(2**63)
    # In float16, 2048 + 1 rounds back to 2048 (ties to even), whatever the order; in float32 the sum is 2050.
    assert rd.reduce_all("sum", nbcoll.to_device(np.array([2048, 1, 1], np.float16))) == np.float16(2050)


def test_grid_stride_loop_covers_more_elements_than_threads(backend, rng, monkeypatch):
    # One block of THREADS threads: every thread folds several elements before the tree starts.
    monkeypatch.setattr(rd, "MAX_BLOCKS", 1)
    host = rng.integers(-1000, 1000, 5 * rd.THREADS + 3).astype(np.int32)
    x = nbcoll.to_device(host)
    assert rd.reduce_all("sum", x) == host.sum()
    assert rd.reduce_all("max", x) == host.max()


def test_reduce_all_of_a_multidimensional_array(backend, rng):
    host = rng.standard_normal((5, 7)).astype(np.float64)
    assert rd.reduce_all("min", nbcoll.to_device(host)) == host.min()


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_array_sums_to_zero_but_has_no_max_or_min(backend, dtype):
    x = nbcoll.zeros(0, dtype)
    total = rd.reduce_all("sum", x)
    assert total == 0 and type(total) is np.dtype(dtype).type
    for op in ("max", "min"):
        with pytest.raises(ValueError, match=f"x: cannot take {op} of an empty array"):
            rd.reduce_all(op, x)


def test_identity_changes_nothing():
    assert rd.identity("sum", np.int8) == 0
    assert rd.identity("max", np.int8) == -128 and rd.identity("min", np.uint64) == np.uint64(2**64 - 1)
    assert rd.identity("max", np.float16) == -np.inf and rd.identity("min", np.float32) == np.inf


def test_reduce_all_errors_name_the_argument(backend):
    with pytest.raises(ValueError, match="op: unknown reduction 'prod'; expected one of sum, max, min"):
        rd.reduce_all("prod", nbcoll.zeros(3))
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        rd.reduce_all("sum", nbcoll.zeros(6)[::2])
    with pytest.raises(TypeError, match="x.dtype: dtype bool is not supported"):
        rd.reduce_all("sum", nbcoll.zeros(3, np.bool_))
    if backend != "numpy":
        with pytest.raises(TypeError, match="x: expected a device array"):
            rd.reduce_all("sum", np.zeros(3, np.float32))
