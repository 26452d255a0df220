"""kernels.scale on bfloat16 and fp8 arrays, called directly: true division and products in float32, rounded once
(not the floor division of the words they are stored as), the same results the collectives' premul and divide
give, on the device backend and on numpy, at sizes 0, 1 and odd ones."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import combine, scale
from nbcoll.kernels import low_precision as lp

LOW = [nbcoll.bfloat16, nbcoll.float8_e4m3fn, nbcoll.float8_e5m2]


def values(size, dtype, rng):
    """``size`` values of ``dtype`` of both signs, well inside its range."""
    return rng.uniform(-40, 40, size).astype(np.float32).astype(dtype)


def once(result32, dtype):
    """A float32 result rounded once to ``dtype`` (ml_dtypes' rounding)."""
    with np.errstate(all="ignore"):
        return result32.astype(dtype)


def same(got, want):
    return np.array_equal(got.view(lp.WORD_DTYPES[want.dtype]), want.view(lp.WORD_DTYPES[want.dtype]))


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("size", [0, 1, 37])
def test_divide_is_a_true_division_in_float32(backend, dtype, size, rng):
    x = values(size, dtype, rng)
    for n in (2, 3):
        got = nbcoll.to_host(scale.divide(nbcoll.to_device(x), n))
        assert got.dtype == dtype
        assert same(got, once(x.astype(np.float32) / np.float32(n), dtype)), (n, x, got)
        assert same(got, nbcoll.to_host(combine.divide(nbcoll.to_device(x), n)))  # as avg's last step does it


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("size", [0, 1, 37])
def test_premul_and_scale_keep_the_factor_in_float32(backend, dtype, size, rng):
    x = values(size, dtype, rng)
    for factor in (0.3, -1.7):  # neither is a bfloat16 or fp8 value: rounding it first would change the products
        want = once(x.astype(np.float32) * np.float32(factor), dtype)
        for f in (scale.premul, scale.scale):
            got = nbcoll.to_host(f(nbcoll.to_device(x), factor))
            assert same(got, want), (f.__name__, factor, x, got)
        assert same(want, nbcoll.to_host(combine.premul(nbcoll.to_device(x), factor)))  # premul_sum's first step


def test_bfloat16_halving_is_exact_and_seen_by_the_words(backend):
    x = np.array([3.0, -3.0, 1.0, 0.0078125], nbcoll.bfloat16)
    got = nbcoll.to_host(scale.divide(nbcoll.to_device(x), 2)).astype(np.float32)
    assert got.tolist() == [1.5, -1.5, 0.5, 0.00390625]


def test_bad_arguments_on_bfloat16_are_refused_by_name(backend):
    x = nbcoll.to_device(np.ones(3, nbcoll.bfloat16))
    with pytest.raises(ValueError, match="n: expected a positive integer"):
        scale.divide(x, 0)
    with pytest.raises(TypeError, match="n: expected a positive integer"):
        scale.divide(x, 2.0)
    with pytest.raises(TypeError, match="scalar: expected a real number"):
        scale.premul(x, "2")
