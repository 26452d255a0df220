"""Tiled and naive matmul against NumPy's ``@``, on the simulator (small shapes) and on the numpy backend (larger).

Tolerances: integers are compared exactly (wrapped to the input dtype, as NumPy's own ``@`` does). Floats are
compared with a float64 ``@``: rtol = atol = 1e-2 for float16 (the result is rounded to float16 once, after a
float32 sum), 1e-5 for float32 and 1e-12 for float64.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels.matmul import TILE, matmul, matmul_naive
from nbcoll.memory import DTYPES

TOLERANCE = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def _values(rng, shape, dtype):
    if dtype.kind == "u":
        return rng.integers(0, 50, size=shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _expected(a, b):
    if a.dtype.kind == "f":
        return np.matmul(a.astype(np.float64), b.astype(np.float64))
    with np.errstate(all="ignore"):
        return np.matmul(a, b)  # NumPy wraps integers to their dtype, as the kernels do


def _check(got, a, b):
    expected = _expected(a, b)
    assert got.dtype == a.dtype and got.shape == expected.shape
    if a.dtype.kind == "f":
        tol = TOLERANCE[a.dtype]
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, expected)


def _matmul(a, b, function=matmul):
    return nbcoll.to_host(function(nbcoll.to_device(a), nbcoll.to_device(b)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ragged_tiles_every_dtype(backend, dtype, rng):
    # 17 x 5 @ 5 x 19: neither M, K nor N is a multiple of TILE, so every edge of every tile is padded.
    a, b = _values(rng, (17, 5), dtype), _values(rng, (5, 19), dtype)
    _check(_matmul(a, b), a, b)


def test_integers_wrap_to_the_input_dtype(backend):
    a = np.full((2, 3), 100, dtype=np.int8)
    b = np.full((3, 2), 100, dtype=np.int8)
    got = _matmul(a, b)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, np.full((2, 2), np.int64(30000).astype(np.int8)))


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((2, 1, 3, 4), (3, 4, 2)),  # batch dimensions broadcast: (2, 1) with (3,) -> (2, 3)
        ((3, 4), (2, 4, 5)),  # a 2-D operand is shared by every batch of b
        ((1, 2, 3), (4, 1, 3, 2)),
        ((4,), (4, 3)),  # 1-D a: a row vector, the M axis is removed
        ((3, 4), (4,)),  # 1-D b: a column vector, the N axis is removed
        ((2, 3, 4), (4,)),
        ((4,), (4,)),  # a dot product: a 0-d result
        ((1, 1), (1, 1)),
        ((2, 0), (0, 3)),  # K = 0: a sum of nothing, zeros
        ((0, 3), (3, 2)),
        ((2, 3), (3, 0)),
        ((0, 2, 3), (3, 2)),  # an empty batch
        ((TILE, TILE + 1), (TILE + 1, 2 * TILE)),  # K one past a tile: a second, almost empty, step
        ((3, 37), (37, 19)),  # a thin output: 4 x 4 tiles, ragged in M, in N (19 = 4 * 4 + 3) and in K
    ],
)
def test_shapes_and_broadcasting(backend, a_shape, b_shape, rng):
    a, b = _values(rng, a_shape, np.dtype(np.float32)), _values(rng, b_shape, np.dtype(np.float32))
    _check(_matmul(a, b), a, b)


def test_integer_batches(backend, rng):
    a, b = _values(rng, (2, 3, 4), np.dtype(np.int64)), _values(rng, (1, 4, 5), np.dtype(np.int64))
    _check(_matmul(a, b), a, b)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.uint8], ids=str)
def test_naive_kernel_agrees(backend, dtype, rng):
    a, b = _values(rng, (17, 5), np.dtype(dtype)), _values(rng, (5, 19), np.dtype(dtype))
    _check(_matmul(a, b, matmul_naive), a, b)


def test_large_on_numpy():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 1, 130, 257)).astype(np.float32)
    b = rng.standard_normal((4, 257, 65)).astype(np.float32)
    with nbcoll.use_backend("numpy"):
        got = _matmul(a, b)
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_named(backend):
    f32 = np.float32
    with pytest.raises(ValueError, match=r"a\.shape=\(2, 3\) by b\.shape=\(4, 5\)"):
        matmul(nbcoll.to_device(np.zeros((2, 3), f32)), nbcoll.to_device(np.zeros((4, 5), f32)))
    with pytest.raises(ValueError, match="batch dimensions do not broadcast"):
        matmul(nbcoll.to_device(np.zeros((2, 2, 3), f32)), nbcoll.to_device(np.zeros((3, 3, 4), f32)))
    with pytest.raises(TypeError, match="a, b: dtypes must match"):
        matmul(nbcoll.to_device(np.zeros((2, 3), f32)), nbcoll.to_device(np.zeros((3, 4), np.float64)))
    with pytest.raises(ValueError, match="a: must be C-contiguous"):
        matmul(nbcoll.to_device(np.zeros((2, 6), f32))[:, ::2], nbcoll.to_device(np.zeros((3, 4), f32)))
    with pytest.raises(ValueError, match="matmul_naive needs"):
        matmul_naive(nbcoll.to_device(np.zeros((2, 2, 3), f32)), nbcoll.to_device(np.zeros((3, 4), f32)))
    with pytest.raises(ValueError, match="a: matmul needs at least one dimension"):
        matmul(nbcoll.memory.empty((), f32), nbcoll.to_device(np.zeros((3, 4), f32)))
    with pytest.raises(TypeError, match="b: expected a device array"):
        matmul(nbcoll.to_device(np.zeros((2, 3), f32)), np.zeros((3, 4), f32).tolist())
