"""Reductions over axes against NumPy, on the simulator (small shapes) and on the numpy backend (larger).

Tolerances: integer sums and every max/min/argmax are compared exactly. Float sums and means differ from NumPy
only in the order of additions: rtol = atol = 2e-3 for float16 (its 11-bit mantissa), 1e-5 for float32 and 1e-12
for float64.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels.reduce_axes import reduce, sum_to_shape
from nbcoll.memory import DTYPES

FLOAT_DTYPES = [d for d in DTYPES if d.kind == "f"]
TOLERANCE = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def _values(rng, shape, dtype):
    if dtype.kind == "u":
        return rng.integers(0, 100, size=shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-100, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _full_range(rng, shape, dtype):
    """Values up to the dtype's limits, for the ops that cannot overflow (max, min, argmax)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * np.finfo(dtype).max / 8).astype(dtype)


def _run(op, x, **kwargs):
    return nbcoll.to_host(reduce(op, nbcoll.to_device(x), **kwargs))


def _expected_sum_dtype(dtype):
    return np.dtype(np.int64) if dtype.kind == "i" else np.dtype(np.uint64) if dtype.kind == "u" else dtype


def _check_close(got, expected, dtype):
    assert got.shape == expected.shape
    if dtype.kind == "f":
        tol = TOLERANCE[dtype]
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_op_on_every_dtype(backend, dtype, rng):
    # 3 x 5 x 7: no dimension is a power of two, so every tree has idle lanes.
    x = _values(rng, (3, 5, 7), dtype)
    got = _run("sum", x, axis=(0, 2), keepdims=True)
    assert got.dtype == _expected_sum_dtype(dtype)
    _check_close(got, np.sum(x, axis=(0, 2), keepdims=True, dtype=np.float64 if dtype.kind == "f" else None), dtype)
    wide = _full_range(rng, (3, 5, 7), dtype)
    for op, numpy_op, axis in [("max", np.max, -1), ("min", np.min, None), ("argmax", np.argmax, 1)]:
        got = _run(op, wide, axis=axis)
        expected = numpy_op(wide, axis=axis)
        assert got.dtype == (np.int64 if op == "argmax" else dtype)
        assert got.shape == np.shape(expected)
        np.testing.assert_array_equal(got, expected)
    if dtype.kind == "f":
        got = _run("mean", x, axis=1)
        assert got.dtype == dtype
        _check_close(got, np.mean(x.astype(np.float64), axis=1), dtype)


@pytest.mark.parametrize(
    "shape, axis, keepdims",
    [
        ((3, 5, 7), None, False),
        ((3, 5, 7), 0, False),
        ((3, 5, 7), -1, True),
        ((3, 5, 7), (0, 2), False),
        ((3, 5, 7), (-1, 0, 1), True),
        ((3, 5, 7), (), False),
        ((3, 5, 7), [0, -1], False),
        ((1, 17, 1), 1, True),
        ((300,), 0, False),
        ((1,), None, False),
    ],
)
def test_axis_forms_match_numpy(backend, shape, axis, keepdims, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    numpy_axis = tuple(axis) if isinstance(axis, list) else axis  # a list is accepted too; NumPy wants a tuple
    got = _run("sum", x, axis=axis, keepdims=keepdims)
    _check_close(got, np.sum(x, axis=numpy_axis, keepdims=keepdims), x.dtype)
    got = _run("max", x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got, np.max(x, axis=numpy_axis, keepdims=keepdims))


def test_argmax_keepdims_and_flat_index(backend, rng):
    x = rng.standard_normal((4, 6)).astype(np.float64)
    np.testing.assert_array_equal(_run("argmax", x, axis=-1, keepdims=True), np.argmax(x, axis=-1, keepdims=True))
    got = _run("argmax", x)
    assert got.shape == () and int(got) == np.argmax(x)


def test_argmax_takes_the_first_of_ties_and_nan(backend):
    ties = np.array([[1, 5, 5, 2, 5], [7, 7, 7, 7, 7]], dtype=np.int32)
    np.testing.assert_array_equal(_run("argmax", ties, axis=1), [1, 0])
    with_nan = np.array([[1.0, np.nan, 3.0, np.nan], [np.inf, 2.0, np.inf, -np.inf]], dtype=np.float32)
    np.testing.assert_array_equal(_run("argmax", with_nan, axis=1), np.argmax(with_nan, axis=1))


def test_max_and_min_propagate_nan(backend):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    np.testing.assert_array_equal(_run("max", x, axis=1), [np.nan, 6.0])
    np.testing.assert_array_equal(_run("min", x, axis=1), [np.nan, 4.0])


def test_float16_sums_accumulate_in_float32(backend):
    # 2048 + 1 rounds back to 2048 in float16 (its spacing there is 2); a float32 accumulator keeps every 1.
    x = np.array([[2048.0] + [1.0] * 8], dtype=np.float16)
    got = _run("sum", x, axis=1)
    assert got.dtype == np.float16 and got[0] == 2056.0


def test_empty_reductions(backend):
    x = np.zeros((3, 0, 2), dtype=np.float32)
    np.testing.assert_array_equal(_run("sum", x, axis=1), np.zeros((3, 2), np.float32))
    assert np.isnan(_run("mean", x, axis=(0, 1))).all()
    np.testing.assert_array_equal(_run("sum", x.astype(np.int8), axis=None), np.int64(0))
    # The kept axis is empty, the reduced one is not: an empty result, no error.
    np.testing.assert_array_equal(_run("max", x, axis=2), np.zeros((3, 0), np.float32))
    for op in ("max", "min", "argmax"):
        with pytest.raises(ValueError, match="empty axis"):
            reduce(op, nbcoll.to_device(x), axis=1)


def test_sum_to_shape_undoes_broadcasting(backend, rng):
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    for shape in [(3, 5), (1, 5), (3, 1), (4, 1, 5), (1,), (), (4, 3, 5)]:
        got = nbcoll.to_host(sum_to_shape(nbcoll.to_device(x), shape))
        lead = x.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(lead + d for d, s in enumerate(shape) if s == 1 and x.shape[lead + d] != 1)
        expected = x.sum(axis=axes, keepdims=True).reshape(shape)
        _check_close(got, expected, x.dtype)


def test_sum_to_shape_refuses_shapes_that_do_not_broadcast(backend):
    x = nbcoll.to_device(np.zeros((4, 3), np.float32))
    for shape in [(2,), (4, 3, 1), (4, 2)]:
        with pytest.raises(ValueError, match="does not broadcast"):
            sum_to_shape(x, shape)


def test_large_reductions_on_numpy():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 33, 1000)).astype(np.float32)
    with nbcoll.use_backend("numpy"):
        np.testing.assert_allclose(_run("sum", x, axis=(0, 2)), x.sum(axis=(0, 2)), rtol=1e-4, atol=1e-3)
        np.testing.assert_array_equal(_run("argmax", x, axis=-1), x.argmax(axis=-1))
        np.testing.assert_allclose(_run("mean", x, axis=1), x.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_named(backend):
    x = nbcoll.to_device(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="op: unknown reduction 'prod'"):
        reduce("prod", x)
    with pytest.raises(TypeError, match="x.dtype: op 'mean' needs a floating dtype"):
        reduce("mean", nbcoll.to_device(np.zeros(3, np.int32)))
    with pytest.raises(ValueError, match="axis: axis 2 is out of range"):
        reduce("sum", x, axis=2)
    with pytest.raises(ValueError, match="axis: repeated axis"):
        reduce("sum", x, axis=(1, -1))
    with pytest.raises(TypeError, match="axis: argmax takes None or one int"):
        reduce("argmax", x, axis=(0, 1))
    with pytest.raises(TypeError, match="axis: expected None, an int or a tuple of ints"):
        reduce("sum", x, axis=1.5)
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        reduce("sum", x[:, ::2])
    with pytest.raises(TypeError, match="x: expected a device array"):
        reduce("sum", [1.0, 2.0])
