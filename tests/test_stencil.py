"""1-D and 2-D valid cross-correlation through shared-memory tiles, against NumPy."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import stencil

DTYPES = nbcoll.DTYPES


def small(rng, shape, dtype):
    """Values small enough that every dtype holds the sums exactly (floats included)."""
    dtype = np.dtype(dtype)
    low = 0 if dtype.kind == "u" else -3
    return rng.integers(low, 4, size=shape).astype(dtype)


def conv(fn, x, w):
    return nbcoll.to_host(fn(nbcoll.to_device(x), nbcoll.to_device(w)))


def numpy_correlate_2d(x, w):
    """An independent 2-D valid cross-correlation: a sum over sliding windows."""
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), w.shape)
    return np.einsum("ijab,ab->ij", windows, w.astype(np.float64))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_conv1d_every_dtype_is_exact(backend, rng, dtype):
    x, w = small(rng, 70, dtype), small(rng, 3, dtype)  # 68 outputs: a full tile and a partial one
    expected = np.correlate(x.astype(np.int64), w.astype(np.int64), "valid").astype(dtype)
    got = conv(stencil.conv1d, x, w)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("n, k", [(1, 1), (5, 5), (4, 5), (0, 1), (65, 1), (130, 65), (10, 7)])
def test_conv1d_lengths(backend, rng, n, k):
    x, w = rng.standard_normal(n).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    got = conv(stencil.conv1d, x, w)
    assert got.shape == (max(n - k + 1, 0),)
    if n >= k:
        np.testing.assert_allclose(got, np.correlate(x, w, "valid"), rtol=1e-5, atol=1e-5)


def test_conv1d_float16(backend, rng):
    x, w = rng.standard_normal(40).astype(np.float16), rng.standard_normal(4).astype(np.float16)
    np.testing.assert_allclose(
        conv(stencil.conv1d, x, w).astype(np.float64),
        np.correlate(x.astype(np.float64), w.astype(np.float64), "valid"),
        rtol=1e-2,
        atol=1e-2,
    )


def test_conv1d_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        x, w = rng.standard_normal(100_000), rng.standard_normal(33)
        np.testing.assert_allclose(conv(stencil.conv1d, x, w), np.correlate(x, w, "valid"), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_conv2d_every_dtype_is_exact(backend, rng, dtype):
    x, w = small(rng, (11, 10), dtype), small(rng, (3, 2), dtype)  # 9 x 9 outputs: tiles of 8 and partial ones
    got = conv(stencil.conv2d, x, w)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, numpy_correlate_2d(x, w).astype(np.int64).astype(dtype))


@pytest.mark.parametrize(
    "x_shape, w_shape",
    [((1, 1), (1, 1)), ((3, 4), (3, 4)), ((2, 5), (3, 1)), ((0, 4), (1, 1)), ((17, 9), (9, 2)), ((5, 12), (1, 9))],
)
def test_conv2d_shapes(backend, rng, x_shape, w_shape):
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    got = conv(stencil.conv2d, x, w)
    expected_shape = (max(x_shape[0] - w_shape[0] + 1, 0), max(x_shape[1] - w_shape[1] + 1, 0))
    assert got.shape == expected_shape
    if all(expected_shape):
        np.testing.assert_allclose(got, numpy_correlate_2d(x, w), rtol=1e-12, atol=1e-12)


def test_conv2d_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        x, w = rng.standard_normal((300, 200)), rng.standard_normal((5, 7))
        np.testing.assert_allclose(conv(stencil.conv2d, x, w), numpy_correlate_2d(x, w), rtol=1e-10, atol=1e-10)


def test_argument_errors(backend):
    x1, x2 = nbcoll.to_device(np.ones(8, np.float32)), nbcoll.to_device(np.ones((4, 4), np.float32))
    with pytest.raises(TypeError, match="w.dtype"):
        stencil.conv1d(x1, nbcoll.to_device(np.ones(2)))
    with pytest.raises(ValueError, match="x: expected a 1-d array"):
        stencil.conv1d(x2, nbcoll.to_device(np.ones(2, np.float32)))
    with pytest.raises(ValueError, match="w: every filter side"):
        stencil.conv1d(x1, nbcoll.to_device(np.ones(0, np.float32)))
    with pytest.raises(ValueError, match="w: every filter side"):
        stencil.conv1d(x1, nbcoll.to_device(np.ones(stencil.MAX_FILTER_1D + 1, np.float32)))
    with pytest.raises(ValueError, match="w: every filter side"):
        stencil.conv2d(x2, nbcoll.to_device(np.ones((stencil.MAX_FILTER_2D + 1, 1), np.float32)))
    with pytest.raises(ValueError, match="w: expected a 2-d array"):
        stencil.conv2d(x2, nbcoll.to_device(np.ones(3, np.float32)))
