"""Elementwise kernels against their NumPy references, on the simulator and on the numpy backend."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import elementwise
from nbcoll.memory import DTYPES

INT_DTYPES = [d for d in DTYPES if d.kind in "iu"]
FLOAT_DTYPES = [d for d in DTYPES if d.kind == "f"]
# Sizes: empty, one element, under a warp, and one more than a whole block (256 threads).
SIZES = [0, 1, 31, 257]


def _values(dtype, n, rng):
    """Values that include the dtype's limits, so wrap-around on integers is exercised."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        edge = np.array([info.min, info.max, 0, 1], dtype=dtype)[: min(n, 4)]
        v[: len(edge)] = edge
        return v
    v = rng.standard_normal(n).astype(dtype) * 3
    if n >= 2:
        v[0], v[1] = np.finfo(dtype).max / 4, -np.finfo(dtype).max / 4
    return v


def _positive(dtype, n, rng):
    return (rng.random(n) * 4 + 0.25).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["neg", "abs", "relu"])
def test_unary_any_dtype(backend, op, dtype, rng):
    for n in SIZES:
        x = _values(dtype, n, rng)
        out = nbcoll.to_host(elementwise.unary(op, nbcoll.to_device(x)))
        np.testing.assert_array_equal(out, elementwise.unary_reference(op, x))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "tanh", "sigmoid", "erf"])
def test_unary_float(backend, op, dtype, rng):
    rtol = 2e-3 if dtype == np.float16 else 1e-6 if dtype == np.float32 else 1e-12
    for n in [0, 1, 257]:
        x = _positive(dtype, n, rng) if op in ("log", "sqrt") else (rng.standard_normal(n) * 3).astype(dtype)
        out = nbcoll.to_host(elementwise.unary(op, nbcoll.to_device(x)))
        assert out.dtype == dtype and out.shape == x.shape
        np.testing.assert_allclose(out, elementwise.unary_reference(op, x), rtol=rtol, atol=rtol)


def test_sigmoid_is_stable_at_extremes(backend):
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    out = nbcoll.to_host(elementwise.unary("sigmoid", nbcoll.to_device(x)))
    np.testing.assert_allclose(out, [0.0, 1.9287498479639178e-22, 0.5, 1.0, 1.0], rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"])
def test_binary_any_dtype(backend, op, dtype, rng):
    for n in [0, 1, 257]:
        a, b = _values(dtype, n, rng), _values(dtype, n, rng)
        if n > 3:
            b[3] = a[3]  # an equal pair for the comparisons
        out = nbcoll.to_host(elementwise.binary(op, nbcoll.to_device(a), nbcoll.to_device(b)))
        np.testing.assert_array_equal(out, elementwise.binary_reference(op, a, b))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["div", "pow"])
def test_binary_float(backend, op, dtype, rng):
    a, b = _positive(dtype, 31, rng), _positive(dtype, 31, rng)
    out = nbcoll.to_host(elementwise.binary(op, nbcoll.to_device(a), nbcoll.to_device(b)))
    rtol = 3e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(out, elementwise.binary_reference(op, a, b), rtol=rtol)


@pytest.mark.parametrize(
    "shape_a, shape_b",
    [((3, 5), (5,)), ((3, 1), (1, 4)), ((2, 1, 3), (4, 1)), ((), (3,)), ((1,), ()), ((0, 3), (3,)), ((2, 0), (1,))],
)
def test_binary_broadcasting(backend, shape_a, shape_b, rng):
    a = rng.integers(-50, 50, size=shape_a).astype(np.int32)
    b = rng.integers(-50, 50, size=shape_b).astype(np.int32)
    for op in ["sub", "lt"]:
        out = nbcoll.to_host(elementwise.binary(op, nbcoll.to_device(a), nbcoll.to_device(b)))
        expected = elementwise.binary_reference(op, a, b)
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out, expected)


def test_where_broadcasts(backend, rng):
    cond = rng.random((3, 1)) > 0.5
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = np.float32(7.0) * np.ones((4,), np.float32)
    out = nbcoll.to_host(elementwise.where(*(nbcoll.to_device(v) for v in (cond, a, b))))
    np.testing.assert_array_equal(out, np.where(cond, a, b))


def test_out_argument_is_written_in_place(backend):
    x = nbcoll.to_device(np.array([1.0, -2.0, 3.0]))
    out = nbcoll.zeros(3, np.float64)
    assert elementwise.unary("neg", x, out=out) is out
    np.testing.assert_array_equal(nbcoll.to_host(out), [-1.0, 2.0, -3.0])


def test_errors_name_the_argument(backend):
    f32 = nbcoll.to_device(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="op: unknown op 'cube'"):
        elementwise.unary("cube", f32)
    with pytest.raises(TypeError, match=r"a, b: dtypes must match"):
        elementwise.binary("add", f32, nbcoll.to_device(np.ones(4, np.float64)))
    with pytest.raises(ValueError, match=r"a, b: shapes cannot broadcast"):
        elementwise.binary("add", f32, nbcoll.to_device(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match=r"x.dtype: op 'exp' needs a floating dtype"):
        elementwise.unary("exp", nbcoll.to_device(np.ones(4, np.int32)))
    with pytest.raises(TypeError, match=r"x: expected a device array"):
        elementwise.unary("neg", [1.0, 2.0])
    with pytest.raises(TypeError, match=r"cond.dtype: expected bool"):
        elementwise.where(f32, f32, f32)
    with pytest.raises(ValueError, match=r"out: expected shape \(4,\) and dtype float32"):
        elementwise.unary("neg", f32, out=nbcoll.zeros(5, np.float32))


def test_non_contiguous_input_is_refused(backend):
    x = nbcoll.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        elementwise.unary("neg", x[:, ::2])
