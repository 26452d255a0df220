"""Conv2d and MaxPool2d against window-by-window NumPy definitions, and their gradients."""

import numpy as np
import pytest
from layer_checks import assert_same_gradients_as_numpy, gradcheck_module, tensor64

import nbcoll
from nbcoll import nn
from nbcoll.autograd import gradcheck
from nbcoll.kernels.im2col import ConvGeometry
from nbcoll.nn.conv import conv2d, max_pool2d
from nbcoll.tensors.ops.conv import Im2Col


def windows(x, kernel, stride, padding, dilation, fill=0.0):
    """Yield (oy, ox, window) for every output position: window is x's (N, C, KH, KW) patch, padded with fill."""
    (kh, kw), (sy, sx), (py, px), (dy, dx) = kernel, stride, padding, dilation
    padded = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)), constant_values=fill)
    oh = (padded.shape[2] - dy * (kh - 1) - 1) // sy + 1
    ow = (padded.shape[3] - dx * (kw - 1) - 1) // sx + 1
    for oy in range(oh):
        for ox in range(ow):
            rows = slice(oy * sy, oy * sy + dy * (kh - 1) + 1, dy)
            cols = slice(ox * sx, ox * sx + dx * (kw - 1) + 1, dx)
            yield oy, ox, oh, ow, padded[:, :, rows, cols]


def numpy_conv2d(x, w, b, stride, padding, dilation):
    out = None
    for oy, ox, oh, ow, patch in windows(x, w.shape[2:], stride, padding, dilation):
        if out is None:
            out = np.zeros((x.shape[0], w.shape[0], oh, ow))
        out[:, :, oy, ox] = np.einsum("nckl,ockl->no", patch, w) + (0 if b is None else b)
    return out


def numpy_max_pool2d(x, kernel, stride, padding, dilation):
    out = None
    for oy, ox, oh, ow, patch in windows(x, kernel, stride, padding, dilation, fill=-np.inf):
        if out is None:
            out = np.zeros(x.shape[:2] + (oh, ow))
        out[:, :, oy, ox] = patch.max(axis=(2, 3))
    return out


def distinct(rng, shape):
    """Values whose gaps are far larger than gradcheck's step, so no window has a tie."""
    return rng.permutation(np.prod(shape)).reshape(shape) * 0.1 + rng.uniform(0, 0.01, shape)


# (in, out, kernel, stride, padding, dilation, bias, image (N, H, W))
CONVS = [
    (1, 1, 1, 1, 0, 1, True, (1, 1, 1)),
    (2, 3, 3, 2, 1, 1, True, (2, 5, 6)),
    (2, 2, (2, 3), (1, 2), (0, 1), 1, False, (1, 4, 5)),
    (1, 2, 2, 1, 1, 2, True, (1, 3, 3)),
]
CONV_IDS = ["1x1", "stride2-pad1", "rect-nobias", "dilated"]


@pytest.mark.parametrize("cin, cout, kernel, stride, padding, dilation, bias, image", CONVS, ids=CONV_IDS)
def test_conv2d_matches_numpy(backend, rng, cin, cout, kernel, stride, padding, dilation, bias, image):
    conv = nn.Conv2d(cin, cout, kernel, stride, padding, dilation, bias=bias, dtype=np.float64)
    x = rng.standard_normal((image[0], cin, *image[1:]))
    b = conv.bias.numpy() if bias else None
    want = numpy_conv2d(x, conv.weight.numpy(), b, conv.stride, conv.padding, conv.dilation)
    got = conv(nbcoll.tensor(x))
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_conv2d_output_size_and_parameters():
    with nbcoll.use_backend("numpy"):
        conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
        assert conv.weight.shape == (8, 3, 3, 3) and conv.bias.shape == (8,)
        assert np.abs(conv.weight.numpy()).max() <= 1 / np.sqrt(27)
        assert conv(nbcoll.tensor(np.zeros((2, 3, 28, 27), np.float32))).shape == (2, 8, 14, 14)
        assert nn.Conv2d(3, 8, 3, bias=False).bias is None


@pytest.mark.parametrize("cin, cout, kernel, stride, padding, dilation, bias, image", CONVS[1:], ids=CONV_IDS[1:])
def test_conv2d_gradcheck(rng, cin, cout, kernel, stride, padding, dilation, bias, image):
    with nbcoll.use_backend("numpy"):
        conv = nn.Conv2d(cin, cout, kernel, stride, padding, dilation, bias=bias, dtype=np.float64)
        assert gradcheck_module(conv, [tensor64(rng, image[0], cin, *image[1:])], atol=1e-6)


def test_conv2d_gradcheck_on_the_device_backend(rng):
    conv = nn.Conv2d(1, 1, 2, stride=1, padding=1, dtype=np.float64)
    assert gradcheck_module(conv, [tensor64(rng, 1, 1, 2, 2)], atol=1e-6)


def test_functional_conv2d_and_im2col_gradcheck(rng):
    with nbcoll.use_backend("numpy"):
        x, w, b = tensor64(rng, 1, 2, 4, 3), tensor64(rng, 3, 2, 2, 2), tensor64(rng, 3)
        assert gradcheck(lambda x, w, b: conv2d(x, w, b, stride=(2, 1), padding=1), [x, w, b], atol=1e-6)
        g = ConvGeometry.of(x.shape, 3, stride=2, padding=1)
        assert gradcheck(lambda x: Im2Col.apply(x, g), [x], atol=1e-6)


# (kernel, stride, padding, dilation, image (N, C, H, W))
POOLS = [
    (1, None, 0, 1, (1, 1, 1, 1)),
    (2, None, 0, 1, (2, 2, 4, 5)),
    (3, 2, 1, 1, (1, 2, 5, 5)),
    ((2, 3), (1, 2), (1, 1), (2, 1), (1, 1, 4, 6)),
]
POOL_IDS = ["1x1", "2x2-ragged", "overlapping-pad", "rect-dilated"]


@pytest.mark.parametrize("kernel, stride, padding, dilation, image", POOLS, ids=POOL_IDS)
def test_max_pool2d_matches_numpy(backend, rng, kernel, stride, padding, dilation, image):
    pool = nn.MaxPool2d(kernel, stride, padding, dilation)
    x = rng.standard_normal(image)
    want = numpy_max_pool2d(x, pool.kernel_size, pool.stride, pool.padding, pool.dilation)
    np.testing.assert_array_equal(pool(nbcoll.tensor(x)).numpy(), want)


@pytest.mark.parametrize("kernel, stride, padding, dilation, image", POOLS[1:], ids=POOL_IDS[1:])
def test_max_pool2d_gradcheck(rng, kernel, stride, padding, dilation, image):
    with nbcoll.use_backend("numpy"):
        x = nbcoll.tensor(distinct(rng, image), dtype=np.float64)
        assert gradcheck_module(nn.MaxPool2d(kernel, stride, padding, dilation), [x])
        assert gradcheck(lambda x: max_pool2d(x, kernel, stride, padding, dilation), [x])


def test_max_pool2d_gradcheck_on_the_device_backend(rng):
    x = nbcoll.tensor(distinct(rng, (1, 1, 3, 3)), dtype=np.float64)
    assert gradcheck_module(nn.MaxPool2d(2, stride=1), [x])


def test_small_cnn_gradients_on_the_device_backend_equal_numpy(rng):
    def make():
        return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, dtype=np.float64), nn.ReLU(), nn.MaxPool2d(2, padding=1))

    assert_same_gradients_as_numpy(make, [rng.standard_normal((1, 1, 3, 4))])


def test_wrong_shapes_name_the_layer_the_expected_and_the_actual_shape():
    with nbcoll.use_backend("numpy"):
        conv = nn.Conv2d(3, 4, 5)
        with pytest.raises(
            ValueError,
            match=r"Conv2d\(3, 4, kernel_size=\(5, 5\).*expected input of shape \(N, 3, H, W\), got \(2, 1, 8, 8\)",
        ):
            conv(nbcoll.tensor(np.zeros((2, 1, 8, 8), np.float32)))
        with pytest.raises(ValueError, match=r"Conv2d\(3, 4.*expected input of shape \(N, 3, H, W\), got \(3, 8, 8\)"):
            conv(nbcoll.tensor(np.zeros((3, 8, 8), np.float32)))
        with pytest.raises(ValueError, match=r"Conv2d\(3, 4.*a window spanning 5 .*x.shape=\(1, 3, 4, 9\)"):
            conv(nbcoll.tensor(np.zeros((1, 3, 4, 9), np.float32)))
        with pytest.raises(
            ValueError, match=r"MaxPool2d\(kernel_size=\(2, 2\).*expected input of shape \(N, C, H, W\), got \(4, 4\)"
        ):
            nn.MaxPool2d(2)(nbcoll.tensor(np.zeros((4, 4), np.float32)))
        with pytest.raises(ValueError, match="padding: must be at most half"):
            nn.MaxPool2d(2, padding=2)
        with pytest.raises(ValueError, match="stride"):
            nn.Conv2d(1, 1, 3, stride=0)


def test_an_input_of_another_dtype_names_the_layer_and_both_dtypes():
    with nbcoll.use_backend("numpy"):
        x32 = nbcoll.tensor(np.zeros((1, 2, 3, 3), np.float32))
        with pytest.raises(TypeError, match=r"Conv2d\(2, 1.*expected input of dtype float64 .*got float32"):
            nn.Conv2d(2, 1, 2, dtype=np.float64)(x32)
        with pytest.raises(TypeError, match=r"LSTM\(3, 2.*expected input of dtype float64 .*got float32"):
            nn.LSTM(3, 2, dtype=np.float64)(x32.reshape(2, 3, 3))
        with pytest.raises(TypeError, match=r"GRUCell\(3, 2.*expected hx of dtype float64 .*got float32"):
            nn.GRUCell(3, 2, dtype=np.float64)(
                nbcoll.tensor(np.zeros((1, 3))), nbcoll.tensor(np.zeros((1, 2), np.float32))
            )
        with pytest.raises(TypeError, match=r"MultiheadAttention\(embed_dim=3.*expected query of dtype float64"):
            nn.MultiheadAttention(3, 1, dtype=np.float64)(x32.reshape(2, 3, 3))
        with pytest.raises(TypeError, match=r"TransformerBlock\(embed_dim=3.*expected input of dtype float64"):
            nn.TransformerBlock(3, 1, dtype=np.float64)(x32.reshape(2, 3, 3))
