"""Softmax, log-softmax and their backward passes against NumPy, on the simulator and on the numpy backend.

The NumPy side is written out here in float64, independently of the module's references. Tolerances:
rtol = atol = 2e-3 for float16 (computed in float32, rounded once to float16), 2e-6 for float32, 1e-12 for float64.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels.softmax import log_softmax, log_softmax_backward, softmax, softmax_backward

FLOAT_DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)]
TOLERANCE = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-12}


def _softmax64(x, axis):
    shifted = x.astype(np.float64) - x.astype(np.float64).max(axis=axis, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)


def _log_softmax64(x, axis):
    shifted = x.astype(np.float64) - x.astype(np.float64).max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _close(got, expected, dtype):
    assert got.dtype == dtype and got.shape == expected.shape
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tol, atol=tol)


def _on_device(function, *arrays, axis):
    return nbcoll.to_host(function(*[nbcoll.to_device(a) for a in arrays], axis=axis))


# Every row layout on float32; float16 and float64 change only the arithmetic, not the indexing, so two layouts
# each suffice for them (the simulator runs every thread in Python: each case costs seconds there).
LAYOUTS = [((3, 5), -1), ((4, 1), 0), ((2, 7, 3), 1), ((2, 1), -1), ((1, 300), -1)]
CASES = [(dtype, *layout) for dtype in FLOAT_DTYPES for layout in (LAYOUTS if dtype == np.float32 else LAYOUTS[:2])]


@pytest.mark.parametrize("dtype, shape, axis", CASES, ids=str)
def test_forward_and_backward(backend, dtype, shape, axis, rng):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)

    y = _on_device(softmax, x, axis=axis)
    _close(y, _softmax64(x, axis), dtype)
    # Backward from the rounded y, as autograd would call it; dx = y * (dy - sum(dy * y)).
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    expected = y64 * (dy64 - (dy64 * y64).sum(axis=axis, keepdims=True))
    _close(_on_device(softmax_backward, y, dy, axis=axis), expected, dtype)

    logp = _on_device(log_softmax, x, axis=axis)
    _close(logp, _log_softmax64(x, axis), dtype)
    logp64 = logp.astype(np.float64)
    expected = dy64 - np.exp(logp64) * dy64.sum(axis=axis, keepdims=True)
    _close(_on_device(log_softmax_backward, logp, dy, axis=axis), expected, dtype)


def test_backward_is_the_gradient(backend, rng):
    # A finite-difference check of softmax_backward: d/dx of sum(softmax(x) * w) along the last axis.
    x = rng.standard_normal((2, 6))
    w = rng.standard_normal((2, 6))
    y = _on_device(softmax, x, axis=-1)
    dx = _on_device(softmax_backward, y, w, axis=-1)
    eps = 1e-6
    for i, j in [(0, 0), (1, 4)]:
        bumped = x.copy()
        bumped[i, j] += eps
        numeric = ((_softmax64(bumped, -1) - _softmax64(x, -1)) * w).sum() / eps
        assert abs(numeric - dx[i, j]) < 1e-5


def test_large_logits_do_not_overflow(backend):
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], dtype=np.float32)
    y = _on_device(softmax, x, axis=-1)
    assert np.isfinite(y).all()
    _close(y, _softmax64(x, -1), np.dtype(np.float32))
    _close(_on_device(log_softmax, x, axis=-1), _log_softmax64(x, -1), np.dtype(np.float32))


def test_empty_arrays(backend):
    x = np.zeros((0, 4), np.float32)
    assert _on_device(softmax, x, axis=-1).shape == (0, 4)
    assert _on_device(log_softmax_backward, x, x, axis=0).shape == (0, 4)
    assert _on_device(softmax, np.zeros((3, 0), np.float32), axis=-1).shape == (3, 0)


def test_large_on_numpy():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((64, 10, 513)) * 5).astype(np.float32)
    with nbcoll.use_backend("numpy"):
        _close(_on_device(softmax, x, axis=1), _softmax64(x, 1), np.dtype(np.float32))
        _close(_on_device(log_softmax, x, axis=-1), _log_softmax64(x, -1), np.dtype(np.float32))


def test_bad_arguments_are_named(backend):
    x = nbcoll.to_device(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="x.dtype: softmax needs a floating dtype"):
        softmax(nbcoll.to_device(np.zeros((2, 3), np.int32)))
    with pytest.raises(ValueError, match="axis: 2 is out of range"):
        log_softmax(x, axis=2)
    with pytest.raises(TypeError, match="axis: expected an int"):
        softmax(x, axis=(0, 1))
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        softmax(nbcoll.to_device(np.zeros((2, 6), np.float32))[:, ::2])
    with pytest.raises(ValueError, match=r"y, dy: shapes must match"):
        softmax_backward(x, nbcoll.to_device(np.zeros((3, 2), np.float32)))
    with pytest.raises(TypeError, match="y, dy: dtypes must match"):
        log_softmax_backward(x, nbcoll.to_device(np.zeros((2, 3), np.float64)))
    with pytest.raises(ValueError, match="x: softmax needs at least one dimension"):
        softmax(nbcoll.memory.empty((), np.float32))
