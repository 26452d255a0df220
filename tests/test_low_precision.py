"""bfloat16, float8_e4m3fn and float8_e5m2: the conversion kernels bit for bit against ml_dtypes over every
representable value, and Tensor.astype to and from them on the device backend and numpy."""

import ml_dtypes
import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import low_precision as lp

LOW = [nbcoll.bfloat16, nbcoll.float8_e4m3fn, nbcoll.float8_e5m2]


def every_word(dtype):
    """Every bit pattern of the dtype: 65536 for bfloat16, 256 for the fp8 types."""
    word = lp.WORD_DTYPES[dtype]
    return np.arange(np.iinfo(word).max + 1).astype(word)


def float32_cases(dtype, rng):
    """Every finite value of ``dtype`` as float32, the midpoints between neighbours and one float32 ulp either side,
    values past the largest, float32 subnormals, huge values, both infs and NaNs (with payloads and signs)."""
    values = np.unique(every_word(dtype).view(dtype).astype(np.float32))
    values = values[np.isfinite(values)]
    mids = ((values[:-1].astype(np.float64) + values[1:]) / 2).astype(np.float32)  # exact: 8 bits or fewer
    up, down = np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))
    big = float(ml_dtypes.finfo(dtype).max)
    random_bits = rng.integers(0, 2**32, size=3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = [np.inf, -np.inf, np.nan, -np.nan, 1e38, -3e38, 1e-45, -1e-40, big * 1.03, big * 1.1]
    specials = np.array(specials, np.float32)
    payload_nans = np.array([0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF], np.uint32).view(np.float32)
    return np.concatenate([values, mids, up, down, random_bits, specials, payload_nans])


def device_widen(dtype, w):
    """The widening kernel alone on the device backend: float32 of every word."""
    out = nbcoll.empty(w.size, np.float32)
    lp.launch_grid_stride(lp._KERNELS[dtype][0], w.size, out, lp.words(nbcoll.to_device(w.view(dtype))))
    return nbcoll.to_host(out)


def device_narrow(dtype, x):
    """The narrowing kernel alone on the device backend: the word of every float32."""
    out = nbcoll.empty(x.size, dtype)
    lp.launch_grid_stride(lp._KERNELS[dtype][1], x.size, lp.words(out), nbcoll.to_device(x))
    return nbcoll.to_host(lp.words(out))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_words_to_float32_bit_exact_for_every_word(dtype):
    w = every_word(dtype)
    expected = lp.WIDEN_REFERENCES[dtype](w).view(np.uint32)
    with nbcoll.use_backend("numpy"):
        assert np.array_equal(nbcoll.to_host(lp.cast(w.view(dtype), np.float32)).view(np.uint32), expected)
    got = device_widen(dtype, w)
    bad = np.flatnonzero(got.view(np.uint32) != expected)
    assert bad.size == 0, [(hex(w[i]), hex(got.view(np.uint32)[i]), hex(expected[i])) for i in bad[:5]]


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_float32_to_words_bit_exact_around_every_value(dtype, rng):
    x = float32_cases(dtype, rng)
    expected = lp.NARROW_REFERENCES[dtype](x)
    with nbcoll.use_backend("numpy"):
        assert np.array_equal(nbcoll.to_host(lp.cast(x, dtype)).view(expected.dtype), expected)
    if dtype == nbcoll.bfloat16:
        # The simulator runs a Python thread per CUDA thread: for bfloat16 it checks every value, the midpoints
        # and their neighbours of the positive half (the sign is one bit, set apart from the rounding), and a few
        # thousand negative ones; numpy above checked them all.
        keep = (np.signbit(x) == 0) | (rng.random(x.size) < 0.02)
        keep[: np.count_nonzero(np.isfinite(every_word(dtype).view(dtype)))] = True
        x, expected = x[keep], expected[keep]
    got = device_narrow(dtype, x)
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, [(float(x[i]), hex(got[i]), hex(expected[i])) for i in bad[:5]]


def test_the_formats_edges_as_ml_dtypes_defines_them():
    x = np.array([464.0, 465.0, 1e30, np.inf, 61439.0, 61440.0, -np.nan], np.float32)
    e4m3 = lp.float32_to_float8_e4m3fn_reference(x)
    e5m2 = lp.float32_to_float8_e5m2_reference(x)
    # e4m3fn: 464 is halfway between 448 (the largest) and the NaN code: ties to even, 448; beyond that, NaN.
    assert e4m3.tolist() == [0x7E, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0xFF]
    # e5m2: 61440 is halfway between 57344 and inf: ties to even (inf); a NaN is the quiet NaN with its sign.
    assert e5m2.tolist() == [0x5F, 0x5F, 0x7C, 0x7C, 0x7B, 0x7C, 0xFE]


@pytest.mark.parametrize("n", [0, 1, 33, 257])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_astype_round_trip_on_both_backends(backend, dtype, n, rng):
    host = (rng.standard_normal(n) * 10).astype(np.float32)
    x = nbcoll.tensor(host)
    low = x.astype(dtype)
    assert low.dtype == dtype and low.shape == (n,)
    assert np.array_equal(low.numpy().view(lp.WORD_DTYPES[dtype]), host.astype(dtype).view(lp.WORD_DTYPES[dtype]))
    back = low.astype(np.float32).numpy()
    assert np.array_equal(back, host.astype(dtype).astype(np.float32))
    # Through float32 to every other dtype: integers truncate toward zero, as the float32 does.
    assert np.array_equal(low.astype(np.int32).numpy(), back.astype(np.int32))
    assert np.array_equal(low.astype(np.float64).numpy(), back.astype(np.float64))
    assert np.array_equal(low.astype(nbcoll.bfloat16).numpy(), back.astype(nbcoll.bfloat16))


def test_a_low_precision_tensor_keeps_its_dtype_and_shape(backend):
    host = np.arange(6, dtype=np.float32).reshape(2, 3).astype(nbcoll.float8_e5m2)
    t = nbcoll.tensor(host)
    assert t.dtype == nbcoll.float8_e5m2 and t.shape == (2, 3)
    assert t.numpy().dtype == nbcoll.float8_e5m2 and np.array_equal(t.numpy(), host)
    assert nbcoll.tensor(3.0).astype(nbcoll.bfloat16).item() == 3.0


def test_other_ops_refuse_low_precision_naming_the_op():
    with nbcoll.use_backend("numpy"):
        x = nbcoll.tensor([1.0, 2.0]).astype(nbcoll.bfloat16)
        with pytest.raises(TypeError, match=r"^Exp: bfloat16 tensors .*astype\(float32\) first"):
            x.exp()
        with pytest.raises(TypeError, match="Add: float8_e4m3fn"):
            y = x.astype(nbcoll.float8_e4m3fn)
            _ = y + y
        with pytest.raises(TypeError, match="dtype: dtype complex64 is not supported; expected one of .*bfloat16"):
            x.astype(np.complex64)


def finite_words(dtype, n, rng):
    """``n`` random words of ``dtype`` whose values are finite (inf and NaN results are checked above)."""
    w = rng.integers(0, np.iinfo(lp.WORD_DTYPES[dtype]).max + 1, size=4 * n + 8).astype(lp.WORD_DTYPES[dtype])
    return w[np.isfinite(w.view(dtype).astype(np.float32))][:n].view(dtype)


@pytest.mark.parametrize("n", [0, 1, 130])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_combine_rounds_each_step_once_from_float32(backend, dtype, n, rng):
    from nbcoll.kernels import combine

    a, b = finite_words(dtype, n, rng), finite_words(dtype, n, rng)
    wide_a, wide_b = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(over="ignore"):
        expected = {
            "sum": wide_a + wide_b,
            "prod": wide_a * wide_b,
            "max": np.where(wide_a >= wide_b, wide_a, wide_b),
            "min": np.where(wide_a <= wide_b, wide_a, wide_b),
        }
    for op, want in expected.items():
        out = nbcoll.empty(n, dtype)
        combine.combine_into(op, out, nbcoll.to_device(a), nbcoll.to_device(b))
        got, want = nbcoll.to_host(out), want.astype(dtype)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (op, got, want)
    # A fold of three sources rounds after each step; avg's division and premul's product round once more.
    c = finite_words(dtype, n, rng)
    out = nbcoll.empty(n, dtype)
    combine.fold_into("sum", out, [nbcoll.to_device(a), nbcoll.to_device(b), nbcoll.to_device(c)])
    step = (wide_a + wide_b).astype(dtype).astype(np.float32)
    assert np.array_equal(
        nbcoll.to_host(out).view(np.uint8), (step + c.astype(np.float32)).astype(dtype).view(np.uint8)
    )
    x = nbcoll.to_device(a)
    combine.divide(x, 3)
    assert np.array_equal(nbcoll.to_host(x).view(np.uint8), (wide_a / np.float32(3)).astype(dtype).view(np.uint8))
    x = nbcoll.to_device(a)
    combine.premul(x, 0.3)
    assert np.array_equal(nbcoll.to_host(x).view(np.uint8), (wide_a * np.float32(0.3)).astype(dtype).view(np.uint8))


def test_the_gradient_flows_back_through_astype():
    with nbcoll.use_backend("numpy"):
        w = nbcoll.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (w.astype(nbcoll.bfloat16).astype(np.float32) * 0.1).sum().backward()
        # the gradient of 0.1 (float32) is cast to bfloat16 on its way back, then widened: 0.1 rounded to 8 bits
        assert np.array_equal(w.grad.numpy(), np.full(3, 0.1, np.float32).astype(nbcoll.bfloat16).astype(np.float32))
