"""im2col / col2im and 2-D max pooling against loop-by-loop NumPy definitions, at awkward sizes (0 and 1 included)."""

import numpy as np
import pytest

import nbcoll
from nbcoll import nn
from nbcoll.kernels import im2col as unfold
from nbcoll.kernels import pool
from nbcoll.kernels.im2col import ConvGeometry

# (shape, kernel_size, stride, padding, dilation): empty batch, a single element, strides and padding that leave
# ragged edges, rectangular kernels, dilation. Small: the simulator runs every thread in Python.
CASES = [
    ((0, 2, 4, 4), 2, 1, 0, 1),
    ((1, 1, 1, 1), 1, 1, 0, 1),
    ((2, 3, 5, 7), 3, 2, 1, 1),
    ((1, 2, 6, 5), (2, 3), (1, 2), (1, 0), (2, 1)),
    ((1, 1, 4, 4), 4, 3, 0, 1),
    ((3, 1, 3, 2), (1, 2), 1, (0, 1), 1),
]
IDS = ["empty", "one", "stride-pad", "rect-dilated", "one-window", "pad-width"]


def taps(g: ConvGeometry):
    """Every (ky, kx, oy, ox, iy, ix) of the geometry, written as the definition reads."""
    (kh, kw), (oh, ow) = g.kernel, g.out_hw
    for ky in range(kh):
        for kx in range(kw):
            for oy in range(oh):
                for ox in range(ow):
                    iy = oy * g.stride[0] - g.padding[0] + ky * g.dilation[0]
                    ix = ox * g.stride[1] - g.padding[1] + kx * g.dilation[1]
                    yield ky, kx, oy, ox, iy, ix


def inside(g, iy, ix):
    return 0 <= iy < g.shape[2] and 0 <= ix < g.shape[3]


def im2col_by_loops(x, g):
    n, c, _, _ = g.shape
    cols = np.zeros((n, c, *g.kernel, *g.out_hw), x.dtype)
    for ky, kx, oy, ox, iy, ix in taps(g):
        if inside(g, iy, ix):
            cols[:, :, ky, kx, oy, ox] = x[:, :, iy, ix]
    return cols.reshape(g.cols_shape)


def max_pool_by_loops(x, g):
    n, c, _, w = g.shape
    out = np.full((n, c, *g.out_hw), -np.inf)
    where = np.full((n, c, *g.out_hw), -1, np.int64)
    for _ky, _kx, oy, ox, iy, ix in sorted(taps(g), key=lambda t: (t[2], t[3], t[0], t[1])):
        if inside(g, iy, ix):
            for b in range(n):
                for ch in range(c):
                    if x[b, ch, iy, ix] > out[b, ch, oy, ox]:
                        out[b, ch, oy, ox], where[b, ch, oy, ox] = x[b, ch, iy, ix], iy * w + ix
    return out, where


def host(a):
    return nbcoll.to_host(a)


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", CASES, ids=IDS)
def test_im2col_matches_its_definition(backend, rng, shape, kernel, stride, padding, dilation):
    g = ConvGeometry.of(shape, kernel, stride, padding, dilation)
    x = rng.standard_normal(shape).astype(np.float32)
    cols = host(unfold.im2col(nbcoll.to_device(x), g))
    assert cols.shape == g.cols_shape and cols.dtype == np.float32
    np.testing.assert_array_equal(cols, im2col_by_loops(x, g))


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", CASES, ids=IDS)
def test_col2im_is_the_transpose_of_im2col(backend, rng, shape, kernel, stride, padding, dilation):
    # <im2col(x), c> == <x, col2im(c)> for every x and c defines the transpose; integers keep the sums exact.
    g = ConvGeometry.of(shape, kernel, stride, padding, dilation)
    x = rng.integers(-3, 4, shape).astype(np.float64)
    c = rng.integers(-3, 4, g.cols_shape).astype(np.float64)
    dx = host(unfold.col2im(nbcoll.to_device(c), g))
    assert dx.shape == shape
    assert np.sum(im2col_by_loops(x, g) * c) == np.sum(x * dx)
    np.testing.assert_array_equal(dx, unfold.col2im_reference(c, g))


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint64], ids=str)
def test_im2col_other_dtypes(backend, rng, dtype):
    g = ConvGeometry.of((1, 2, 3, 4), 2, 1, 1)
    x = rng.integers(0, 9, g.shape).astype(dtype)
    np.testing.assert_array_equal(host(unfold.im2col(nbcoll.to_device(x), g)), im2col_by_loops(x, g))


def test_col2im_float16_accumulates_overlapping_windows(backend):
    g = ConvGeometry.of((1, 1, 3, 3), 2, 1, 0)  # the centre input sits in all four windows
    dx = host(unfold.col2im(nbcoll.to_device(np.ones(g.cols_shape, np.float16)), g))
    assert dx.dtype == np.float16
    np.testing.assert_array_equal(dx[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", CASES, ids=IDS)
def test_max_pool2d_matches_its_definition(backend, rng, shape, kernel, stride, padding, dilation):
    g = ConvGeometry.of(shape, kernel, stride, padding, dilation)
    x = rng.standard_normal(shape)
    out, argmax = (host(a) for a in pool.max_pool2d(nbcoll.to_device(x), g))
    expected_out, expected_where = max_pool_by_loops(x, g)
    np.testing.assert_array_equal(argmax, expected_where)
    np.testing.assert_array_equal(out, np.where(expected_where >= 0, expected_out, -np.inf))  # all padding: -inf


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=str)
def test_a_window_of_padding_only_holds_the_lowest_value_and_sends_no_gradient(backend, dtype):
    # kernel 2, dilation 2, padding 1 over one input: the taps fall at -1 and 1, both outside (PyTorch: -inf).
    g = ConvGeometry.of((1, 1, 1, 1), 2, 1, 1, 2)
    out, argmax = (host(a) for a in pool.max_pool2d(nbcoll.to_device(np.full(g.shape, 5, dtype)), g))
    assert argmax.reshape(-1).tolist() == [-1]
    assert out.reshape(-1)[0] == (-np.inf if dtype == np.float32 else np.iinfo(dtype).min)
    if dtype == np.float32:
        x = nbcoll.tensor(np.full((1, 1, 1, 1), 5.0, np.float32), requires_grad=True)
        y = nn.MaxPool2d(2, stride=1, padding=1, dilation=2)(x)
        assert y.numpy().reshape(-1).tolist() == [-np.inf]
        y.backward(nbcoll.tensor(np.ones(y.shape, np.float32)))
        assert x.grad.numpy().reshape(-1).tolist() == [0.0]


def test_max_pool2d_ties_pick_the_first_and_nan_wins(backend):
    g = ConvGeometry.of((1, 2, 2, 2), 2)
    x = np.array([[[[1.0, 3.0], [3.0, 0.0]], [[1.0, np.nan], [5.0, np.nan]]]], np.float32)
    out, argmax = (host(a) for a in pool.max_pool2d(nbcoll.to_device(x), g))
    assert argmax.reshape(-1).tolist() == [1, 1]
    assert out[0, 0, 0, 0] == 3.0 and np.isnan(out[0, 1, 0, 0])


def test_max_pool2d_integers(backend, rng):
    g = ConvGeometry.of((2, 1, 4, 5), 2, 2)
    x = rng.integers(-100, 100, g.shape).astype(np.int32)
    out, argmax = (host(a) for a in pool.max_pool2d(nbcoll.to_device(x), g))
    expected_out, expected_where = max_pool_by_loops(x, g)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected_out.astype(np.int32))
    np.testing.assert_array_equal(argmax, expected_where)


@pytest.mark.parametrize("dtype", [np.float64, np.float16], ids=str)
@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", CASES[:4], ids=IDS[:4])
def test_max_pool2d_backward_sends_each_gradient_to_its_maximum(
    backend, rng, shape, kernel, stride, padding, dilation, dtype
):
    g = ConvGeometry.of(shape, kernel, stride, padding, dilation)
    x = rng.standard_normal(shape)
    _, where = max_pool_by_loops(x, g)
    dy = rng.integers(-3, 4, where.shape).astype(dtype)
    dx = host(pool.max_pool2d_backward(nbcoll.to_device(dy), nbcoll.to_device(where), g))
    expected = np.zeros(shape)
    for (b, ch, oy, ox), at in np.ndenumerate(where):
        if at >= 0:
            expected[b, ch, at // shape[3], at % shape[3]] += dy[b, ch, oy, ox]
    assert dx.dtype == dtype
    np.testing.assert_array_equal(dx, expected.astype(dtype))


def test_bad_geometry_and_shapes_are_named():
    with pytest.raises(ValueError, match="kernel_size: a window spanning 5"):
        ConvGeometry.of((1, 1, 4, 4), 5)
    with pytest.raises(ValueError, match="stride"):
        ConvGeometry.of((1, 1, 4, 4), 2, stride=0)
    with pytest.raises(ValueError, match=r"x: expected shape \(N, C, H, W\)"):
        ConvGeometry.of((4, 4), 2)
    with nbcoll.use_backend("numpy"):
        g = ConvGeometry.of((1, 1, 4, 4), 2)
        with pytest.raises(ValueError, match=r"x: expected shape \(1, 1, 4, 4\)"):
            unfold.im2col(np.zeros((1, 1, 4, 5), np.float32), g)
        with pytest.raises(TypeError, match="cols.dtype"):
            unfold.col2im(np.zeros(g.cols_shape, np.int32), g)
