"""combine, combine_into, scale/premul, divide and the reduction-op description, against NumPy.

Each combine is one IEEE operation per element (float16 through float32, then one rounding), so results are
compared bit for bit on every dtype, floats included; integers must wrap around exactly as NumPy's do.
"""

import dataclasses
import warnings

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import combine as cb

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

DTYPES = [dt.name for dt in nbcoll.DTYPES]
OPS = ["sum", "prod", "max", "min"]
NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def sizes_for(backend):
    # The simulator runs each thread in Python: small sizes there, not multiples of the block size.
    return [0, 1, 31, 257] + ([100_003] if backend == "numpy" else [])


def sample(rng, dtype, n):
    """Random values over the dtype's whole range, with its extreme values first, so that results overflow."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dtype)
        extremes = [info.max, info.min, info.max - 1, 1]
    else:
        values = (rng.standard_normal(n) * 100).astype(dtype)
        big = np.finfo(dtype).max
        extremes = [big * 0.75, -big * 0.75, big / 3, np.finfo(dtype).tiny]
    values[: min(n, 4)] = np.array(extremes[: min(n, 4)], dtype)
    return values


def expected_combine(op, a, b):
    acc = np.float32 if a.dtype == np.float16 else a.dtype
    with np.errstate(all="ignore"):
        return NUMPY_OPS[op](a.astype(acc), b.astype(acc)).astype(a.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_combine_matches_numpy_for_every_op_and_dtype(backend, rng, op, dtype):
    for n in sizes_for(backend):
        a, b = sample(rng, dtype, n), sample(rng, dtype, n)[::-1].copy()
        dst = nbcoll.to_device(a)
        returned = cb.combine(op, dst, nbcoll.to_device(b))
        assert returned is dst
        np.testing.assert_array_equal(nbcoll.to_host(dst), expected_combine(op, a, b), err_msg=f"n={n}")


@pytest.mark.parametrize("dtype", ["int8", "uint64", "float16", "float64"])
def test_combine_into_writes_a_third_array_or_either_operand(backend, rng, dtype):
    a, b = sample(rng, dtype, 31), sample(rng, dtype, 31)[::-1].copy()
    out = nbcoll.zeros(31, dtype)
    assert cb.combine_into("sum", out, nbcoll.to_device(a), nbcoll.to_device(b)) is out
    np.testing.assert_array_equal(nbcoll.to_host(out), expected_combine("sum", a, b))
    a_dev = nbcoll.to_device(a)
    cb.combine_into("max", a_dev, a_dev, nbcoll.to_device(b))
    np.testing.assert_array_equal(nbcoll.to_host(a_dev), expected_combine("max", a, b))
    b_dev = nbcoll.to_device(b)
    cb.combine_into("prod", b_dev, nbcoll.to_device(a), b_dev)
    np.testing.assert_array_equal(nbcoll.to_host(b_dev), expected_combine("prod", a, b))


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32"])
@pytest.mark.parametrize("op", OPS)
def test_fold_into_folds_every_source_in_order_into_a_third_array_or_the_first(backend, rng, op, dtype):
    # What a collective's reduce step launches: every rank's part, in rank order, pair by pair as the kernel does.
    for n in sizes_for(backend)[:3]:  # 0, 1 and 31: a launch a source, one thread an element on the simulator
        for count in (2, 3, 4):
            parts = [sample(rng, dtype, n)[:: (-1) ** k].copy() for k in range(count)]
            expected = expected_combine(op, parts[0], parts[1])
            for part in parts[2:]:
                expected = expected_combine(op, expected, part)
            sources = [nbcoll.to_device(part) for part in parts]
            out = nbcoll.zeros(n, dtype)
            cb.fold_into(op, out, sources)
            np.testing.assert_array_equal(nbcoll.to_host(out), expected, err_msg=f"n={n}, {count} sources")
            cb.fold_into(op, sources[0], sources)  # in place: into the first source
            np.testing.assert_array_equal(nbcoll.to_host(sources[0]), expected, err_msg=f"n={n}, in place")


def test_fold_into_keeps_numpy_quiet_where_a_kernel_would_be():
    # A float sum that overflows, or meets inf - inf, gives inf or nan on a device without a word; so does the
    # reference, for any number of sources.
    big = np.finfo(np.float32).max
    parts = [np.array([big, np.inf, 1.0], np.float32), np.array([big, -np.inf, 2.0], np.float32)]
    out = np.zeros(3, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cb.fold_reference("sum", out, parts + [np.ones(3, np.float32)])
    assert np.isinf(out[0]) and np.isnan(out[1]) and out[2] == 4.0


def test_combine_accepts_same_shape_multidimensional_arrays_and_slices(backend, rng):
    a, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    dst = nbcoll.to_device(a)
    cb.combine("min", dst, nbcoll.to_device(b))
    np.testing.assert_array_equal(nbcoll.to_host(dst), np.minimum(a, b))

    flat, chunk = nbcoll.to_device(np.arange(10, dtype=np.int32)), nbcoll.to_device(np.full(4, 100, np.int32))
    cb.combine("sum", flat[3:7], chunk)  # a collective folds one chunk of a buffer
    np.testing.assert_array_equal(nbcoll.to_host(flat), [0, 1, 2, 103, 104, 105, 106, 7, 8, 9])


@pytest.mark.parametrize("dtype", DTYPES)
def test_avg_sums_on_every_rank_then_divides_once(backend, rng, dtype):
    ranks = 3
    if np.dtype(dtype).kind in "iu":
        inputs = [rng.integers(0, 40, 31).astype(dtype) for _ in range(ranks)]
    else:
        inputs = [(rng.standard_normal(31) * 10).astype(dtype) for _ in range(ranks)]
    acc_dtype = np.dtype(np.float32 if dtype == "float16" else dtype).type
    total = inputs[0]
    for x in inputs[1:]:
        total = (total.astype(acc_dtype) + x.astype(acc_dtype)).astype(dtype)
    if np.dtype(dtype).kind in "iu":
        expected = total // np.dtype(dtype).type(ranks)
    else:
        expected = (total.astype(acc_dtype) / acc_dtype(ranks)).astype(dtype)

    acc = nbcoll.to_device(inputs[0])
    for x in inputs[1:]:
        cb.combine("avg", acc, nbcoll.to_device(x))
    cb.post_op("avg", acc, ranks)
    np.testing.assert_array_equal(nbcoll.to_host(acc), expected)


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint64"])
def test_divide_floors_integers_like_numpy(backend, dtype):
    info = np.iinfo(dtype)
    values = np.array([info.min, info.max, 0, 7, info.max - 1] + ([-7, -1, -128] if info.min < 0 else [1]), dtype)
    for n in (1, 2, 3, 1000):
        x = nbcoll.to_device(values)
        cb.divide(x, n)
        wide = np.uint64 if dtype == "uint64" else np.int64
        np.testing.assert_array_equal(nbcoll.to_host(x), (values.astype(wide) // wide(n)).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_premul_sum_multiplies_each_input_then_sums(backend, rng, dtype):
    kind = np.dtype(dtype).kind
    scalar = {"i": -3, "u": 3, "f": 0.375}[kind]
    op = cb.premul_sum(scalar)
    x0, x1 = sample(rng, dtype, 31), sample(rng, dtype, 31)[::-1].copy()
    acc_dtype = np.dtype(np.float32 if dtype == "float16" else dtype).type
    s = np.dtype(dtype).type(scalar)
    with np.errstate(all="ignore"):
        scaled = [(x.astype(acc_dtype) * acc_dtype(s)).astype(dtype) for x in (x0, x1)]
    expected = expected_combine("sum", *scaled)

    d0, d1 = nbcoll.to_device(x0), nbcoll.to_device(x1)
    cb.pre_op(op, d0)
    cb.pre_op(op, d1)
    np.testing.assert_array_equal(nbcoll.to_host(d1), scaled[1])
    cb.combine(op, d0, d1)
    np.testing.assert_array_equal(nbcoll.to_host(d0), expected)


def test_scale_wraps_integers_and_pre_and_post_ops_leave_other_ops_alone(backend):
    x = nbcoll.to_device(np.array([-128, 127, 2], np.int8))
    cb.scale(x, -1)
    np.testing.assert_array_equal(nbcoll.to_host(x), [-128, -127, -2])
    cb.premul(x, 2)
    np.testing.assert_array_equal(nbcoll.to_host(x), [0, 2, -4])
    for op in ("sum", "prod", "max", "min"):
        cb.pre_op(op, x)
        cb.post_op(op, x, 4)
    cb.pre_op("avg", x)
    np.testing.assert_array_equal(nbcoll.to_host(x), [0, 2, -4])


def test_parse_op_names_and_premul_sum():
    assert [cb.parse_op(op) for op in ("sum", "PROD", "Max", "min", "avg")] == ["sum", "prod", "max", "min", "avg"]
    op = cb.premul_sum(0.5)
    assert cb.parse_op(op) is op and op == cb.PremulSum(0.5) and str(op) == "premul_sum(0.5)"
    assert cb.premul_sum(np.float32(2.0)).scalar == 2.0 and type(cb.premul_sum(np.int64(3)).scalar) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.scalar = 2.0
    assert [cb.kernel_op(o) for o in ("sum", "avg", op, "max")] == ["sum", "sum", "sum", "max"]


@pytest.mark.parametrize("bad", ["mean", "premul_sum", "", None, 3])
def test_parse_op_refuses_unknown_ops(bad):
    message = f"op: unknown reduction op {bad!r}; expected one of sum, prod, max, min, avg or premul_sum(scalar)"
    with pytest.raises(ValueError) as info:
        cb.parse_op(bad)
    assert str(info.value) == message
    with pytest.raises(ValueError, match="op: unknown reduction op"):
        cb.combine(bad, nbcoll.zeros(2), nbcoll.zeros(2))


def test_premul_sum_refuses_non_numbers():
    with pytest.raises(TypeError, match="scalar: expected a real number"):
        cb.premul_sum("2")
    with pytest.raises(TypeError, match="scalar: expected a real number"):
        cb.premul_sum(True)
    with pytest.raises(ValueError, match="scalar: must be finite"):
        cb.premul_sum(float("nan"))


def test_combine_errors_name_the_argument(backend):
    f32 = nbcoll.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"src: dtype must match dst.*src.dtype=int32"):
        cb.combine("sum", f32, nbcoll.zeros(4, np.int32))
    with pytest.raises(ValueError, match=r"src: shape must match dst.*src.shape=\(5,\)"):
        cb.combine("sum", f32, nbcoll.zeros(5, np.float32))
    with pytest.raises(ValueError, match="dst: must be C-contiguous"):
        cb.combine("sum", nbcoll.zeros(8, np.float32)[::2], f32)
    with pytest.raises(ValueError, match="b: must be C-contiguous"):
        cb.combine_into("sum", f32, f32, nbcoll.zeros((4, 2), np.float32)[:, 0])
    with pytest.raises(TypeError, match="dst.dtype: dtype bool is not supported"):
        cb.combine("max", nbcoll.zeros(4, np.bool_), nbcoll.zeros(4, np.bool_))
    with pytest.raises(ValueError, match=r"out: shape must match|a: shape must match"):
        cb.combine_into("sum", f32, nbcoll.zeros(3, np.float32), f32)
    if backend != "numpy":
        with pytest.raises(TypeError, match="src: expected a device array"):
            cb.combine("sum", f32, np.zeros(4, np.float32))


def test_scale_and_divide_errors_name_the_argument(backend):
    ints = nbcoll.zeros(4, np.int32)
    with pytest.raises(ValueError, match="factor: 0.5 cannot be represented exactly as int32"):
        cb.scale(ints, 0.5)
    with pytest.raises(ValueError, match="scalar: -1 cannot be represented exactly as uint8"):
        cb.premul(nbcoll.zeros(4, np.uint8), -1)
    with pytest.raises(TypeError, match="factor: expected a real number"):
        cb.scale(ints, "2")
    with pytest.raises(ValueError, match="n: expected a positive integer"):
        cb.divide(ints, 0)
    with pytest.raises(TypeError, match="n: expected a positive integer"):
        cb.divide(ints, 2.0)
