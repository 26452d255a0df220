"""Layer norm and its backward against NumPy references, and the backward against finite differences."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import norm

FLOATS = [np.float16, np.float32, np.float64]
TOLERANCE = {np.float16: 2e-2, np.float32: 2e-5, np.float64: 1e-12}


def dev(a):
    return None if a is None else nbcoll.to_device(a)


def host(*arrays):
    return tuple(nbcoll.to_host(a) for a in arrays)


def textbook_layer_norm(x, weight, bias, eps):
    """Layer norm written plainly in float64, independent of the module's reference."""
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    return (
        y * (1 if weight is None else weight) + (0 if bias is None else bias),
        mean[..., 0],
        1 / np.sqrt(var[..., 0] + eps),
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(1,), (3, 1), (2, 5), (2, 3, 130), (0, 4)])
def test_layer_norm_matches_reference(backend, rng, dtype, shape):
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    weight = rng.standard_normal(shape[-1]).astype(dtype)
    bias = rng.standard_normal(shape[-1]).astype(dtype)
    y, mean, rstd = host(*norm.layer_norm(dev(x), dev(weight), dev(bias), eps=1e-5))
    stats = norm.statistics_dtype(dtype)
    assert y.dtype == dtype and y.shape == shape
    assert mean.dtype == rstd.dtype == stats and mean.shape == rstd.shape == shape[:-1]
    y_expected, mean_expected, rstd_expected = textbook_layer_norm(x, weight, bias, 1e-5)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(mean, mean_expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(rstd, rstd_expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(y, y_expected, rtol=tol, atol=tol * 10)


def test_layer_norm_without_weight_and_bias(backend, rng):
    x = rng.standard_normal((4, 7))
    y, _, _ = host(*norm.layer_norm(dev(x), None, None))
    np.testing.assert_allclose(y, textbook_layer_norm(x, None, None, 1e-5)[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.mean(axis=-1), 0, atol=1e-12)


def test_layer_norm_of_constant_rows_is_bias(backend):
    x = np.full((2, 6), 4.0, np.float32)
    bias = np.arange(6, dtype=np.float32)
    y, mean, rstd = host(*norm.layer_norm(dev(x), dev(np.ones(6, np.float32)), dev(bias), eps=1e-5))
    np.testing.assert_allclose(y, np.broadcast_to(bias, (2, 6)))
    np.testing.assert_allclose(mean, 4.0)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(np.float32(1e-5)), rtol=1e-6)


def test_layer_norm_float16_keeps_float32_statistics(backend):
    # Values near 1000 with spread 1: float16 sums would lose the spread; float32 statistics do not.
    x = (1000 + np.array([[-1.5, -0.5, 0.5, 1.5] * 8])).astype(np.float16)
    y, mean, rstd = host(*norm.layer_norm(dev(x), None, None, eps=0.0))
    assert mean.dtype == np.float32
    np.testing.assert_allclose(mean, 1000.0)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(1.25), rtol=1e-6)
    np.testing.assert_allclose(y.astype(np.float64), (x.astype(np.float64) - 1000) / np.sqrt(1.25), rtol=2e-3)


def test_layer_norm_large_rows_numpy(rng):
    with nbcoll.use_backend("numpy"):
        x = rng.standard_normal((64, 1000)).astype(np.float32)
        y, _, _ = host(*norm.layer_norm(dev(x), None, None))
        np.testing.assert_allclose(y, textbook_layer_norm(x, None, None, 1e-5)[0], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Backward


def textbook_backward(dy, x, weight, eps):
    """The backward pass by the chain rule on the float64 forward, written out in full."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    d = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    g = dy * (1 if weight is None else weight)
    dx = rstd / d * (d * g - g.sum(axis=-1, keepdims=True) - xhat * (g * xhat).sum(axis=-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(1,), (3, 1), (2, 5), (2, 2, 130), (0, 3)])
def test_layer_norm_backward_matches_reference(backend, rng, dtype, shape):
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    weight = rng.standard_normal(shape[-1]).astype(dtype)
    _, mean, rstd = norm.layer_norm(dev(x), dev(weight), None)
    dx, dweight, dbias = host(*norm.layer_norm_backward(dev(dy), dev(x), mean, rstd, dev(weight)))
    assert dx.dtype == dweight.dtype == dbias.dtype == dtype
    assert dx.shape == shape and dweight.shape == dbias.shape == shape[-1:]
    dx_expected, dweight_expected, dbias_expected = textbook_backward(dy, x, weight, 1e-5)
    tol = TOLERANCE[dtype] * 5
    np.testing.assert_allclose(dx, dx_expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(dweight, dweight_expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(dbias, dbias_expected, rtol=tol, atol=tol)


def test_layer_norm_backward_without_weight(backend, rng):
    x, dy = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    _, mean, rstd = norm.layer_norm(dev(x), None, None)
    dx, _, dbias = host(*norm.layer_norm_backward(dev(dy), dev(x), mean, rstd, None))
    np.testing.assert_allclose(dx, textbook_backward(dy, x, None, 1e-5)[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dbias, dy.sum(axis=0), rtol=1e-12)


def test_layer_norm_backward_against_finite_differences(backend, rng):
    # loss = sum(layer_norm(x, w, b) * r): its gradients are the backward pass with dy = r. The loss is
    # evaluated by the NumPy reference (the forward kernel is checked against it above), which keeps the
    # dozens of forward passes off the simulator.
    x, r = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    w, b = rng.standard_normal(5), rng.standard_normal(5)

    def loss(x, w, b):
        return float((norm.layer_norm_reference(x, w, b, eps=1e-3)[0] * r).sum())

    _, mean, rstd = norm.layer_norm(dev(x), dev(w), dev(b), eps=1e-3)
    dx, dw, db = host(*norm.layer_norm_backward(dev(r), dev(x), mean, rstd, dev(w)))
    h = 1e-6
    for analytic, which in ((dx, 0), (dw, 1), (db, 2)):
        numeric = np.zeros_like(analytic)
        for position in np.ndindex(analytic.shape):
            args_plus, args_minus = [x.copy(), w.copy(), b.copy()], [x.copy(), w.copy(), b.copy()]
            args_plus[which][position] += h
            args_minus[which][position] -= h
            numeric[position] = (loss(*args_plus) - loss(*args_minus)) / (2 * h)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7)


def test_layer_norm_backward_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        x, dy = rng.standard_normal((100, 300)), rng.standard_normal((100, 300))
        weight = rng.standard_normal(300)
        _, mean, rstd = norm.layer_norm(x, weight, None)
        for got, expected in zip(
            norm.layer_norm_backward(dy, x, mean, rstd, weight), textbook_backward(dy, x, weight, 1e-5), strict=True
        ):
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-10)


def test_argument_errors(backend):
    x = dev(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="x.dtype"):
        norm.layer_norm(dev(np.ones((2, 3), np.int32)), None, None)
    with pytest.raises(ValueError, match="weight: expected shape"):
        norm.layer_norm(x, dev(np.ones(4, np.float32)), None)
    with pytest.raises(TypeError, match="bias.dtype"):
        norm.layer_norm(x, None, dev(np.ones(3)))
    with pytest.raises(ValueError, match="x: layer norm needs a non-empty last axis"):
        norm.layer_norm(dev(np.ones((2, 0), np.float32)), None, None)
    with pytest.raises(ValueError, match="eps"):
        norm.layer_norm(x, None, None, eps=-1.0)
    with pytest.raises(TypeError, match="mean.dtype"):
        norm.layer_norm_backward(x, x, dev(np.ones(2)), dev(np.ones(2, np.float32)), None)
    with pytest.raises(ValueError, match="rstd: expected shape"):
        norm.layer_norm_backward(x, x, dev(np.ones(2, np.float32)), dev(np.ones(3, np.float32)), None)
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        norm.layer_norm(dev(np.ones((3, 4), np.float32))[:, ::2], None, None)
