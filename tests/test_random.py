"""Dropout: one counter-based mask for a seed on every backend, the right keep rate, and the right scaling."""

import math

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import random as rnd

FLOATS = [np.float16, np.float32, np.float64]


def device_dropout(x, p, seed):
    y, mask = rnd.dropout(nbcoll.to_device(x), p, seed)
    return nbcoll.to_host(y), nbcoll.to_host(mask)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(0,), (1,), (3, 0), (7, 37)])
def test_same_seed_gives_the_same_mask_on_every_backend(rng, dtype, shape):
    x = rng.standard_normal(shape).astype(dtype)
    y_device, mask_device = device_dropout(x, 0.4, 1234)
    with nbcoll.use_backend("numpy"):
        y_numpy, mask_numpy = device_dropout(x, 0.4, 1234)
    assert mask_device.dtype == np.uint8 and mask_device.shape == shape
    np.testing.assert_array_equal(mask_device, mask_numpy)
    # Bit for bit: the same IEEE product x * scale in x's dtype.
    assert y_device.dtype == y_numpy.dtype == dtype
    np.testing.assert_array_equal(y_device.view(np.uint8), y_numpy.view(np.uint8))


def test_mask_is_the_documented_splitmix64_stream():
    # The first outputs of SplitMix64 seeded with 0 (the reference values of its published C code), so that the
    # hash can be reproduced outside nbcoll: with key 0, z = mix(i * gamma) for i = 1, 2, 3.
    with np.errstate(over="ignore"):
        z = rnd.mix64(np.arange(1, 4, dtype=np.uint64) * np.uint64(rnd.GOLDEN_GAMMA))
    assert [int(v) for v in z] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_y_is_x_times_mask_over_keep_probability(backend, rng):
    x = rng.standard_normal(300).astype(np.float64)
    p = 0.25
    y, mask = device_dropout(x, p, 99)
    assert set(np.unique(mask)) <= {0, 1}
    np.testing.assert_allclose(y, x * mask / (1 - p), rtol=1e-15)


def test_different_seeds_give_different_masks(backend):
    x = np.ones(200, np.float32)
    masks = [device_dropout(x, 0.5, seed)[1] for seed in (0, 1, 2, 2**63 + 5)]
    for a in range(len(masks)):
        for b in range(a + 1, len(masks)):
            # Two independent masks of 200 fair coins agree on all of them with probability 2**-200.
            assert (masks[a] != masks[b]).any()
    np.testing.assert_array_equal(masks[0], device_dropout(x, 0.5, 0)[1])


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_kept_fraction_is_near_one_minus_p(p):
    n = 1_000_000
    with nbcoll.use_backend("numpy"):
        _, mask = device_dropout(np.ones(n, np.float32), p, 2024)
    kept = mask.sum(dtype=np.int64)
    # Binomial(n, 1 - p): a 6-sigma band (plus one element), which a correct generator leaves about once in 5e8.
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(kept - n * (1 - p)) <= 6 * sigma + 1


def test_p_zero_keeps_everything_and_p_one_drops_everything(backend):
    x = np.arange(1, 50, dtype=np.float32)
    y, mask = device_dropout(x, 0.0, 3)
    np.testing.assert_array_equal(mask, 1)
    np.testing.assert_array_equal(y, x)
    y, mask = device_dropout(x, 1.0, 3)
    np.testing.assert_array_equal(mask, 0)
    np.testing.assert_array_equal(y, 0)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout_backward(backend, rng, dtype):
    x = rng.standard_normal((5, 9)).astype(dtype)
    dy = rng.standard_normal((5, 9)).astype(dtype)
    _, mask = device_dropout(x, 0.3, 11)
    dx = nbcoll.to_host(rnd.dropout_backward(nbcoll.to_device(dy), nbcoll.to_device(mask), 0.3))
    assert dx.dtype == dtype
    expected = np.where(mask == 1, dy * dtype(1 / 0.7), dtype(0))
    np.testing.assert_array_equal(dx, expected)


def test_argument_errors(backend):
    x = nbcoll.to_device(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="x.dtype"):
        rnd.dropout(nbcoll.to_device(np.ones(4, np.int32)), 0.5, 1)
    with pytest.raises(ValueError, match="p:"):
        rnd.dropout(x, 1.5, 1)
    with pytest.raises(ValueError, match="seed:"):
        rnd.dropout(x, 0.5, -1)
    with pytest.raises(TypeError, match="mask.dtype"):
        rnd.dropout_backward(x, nbcoll.to_device(np.ones(4, np.int32)), 0.5)
    with pytest.raises(ValueError, match="mask: expected"):
        rnd.dropout_backward(x, nbcoll.to_device(np.ones(3, np.uint8)), 0.5)
