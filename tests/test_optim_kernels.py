"""The fused update kernels against their NumPy references, at sizes around the block size, 0 and 1 included."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import optim as ok


def sizes_for(backend):
    # The simulator runs every thread in Python: a few small sizes that are not multiples of the block.
    return [0, 1, 33, 257] if backend != "numpy" else [0, 1, 33, 257, 10_001]


def arrays(rng, n, dtype, count):
    return [rng.standard_normal(n).astype(dtype) for _ in range(count)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "momentum, dampening, weight_decay, nesterov, first",
    [(0.0, 0.0, 0.0, False, False), (0.9, 0.1, 0.01, False, False), (0.9, 0.0, 0.01, True, False), (0.5, 0, 0, 0, 1)],
)
def test_sgd_kernel_matches_reference(backend, rng, dtype, momentum, dampening, weight_decay, nesterov, first):
    for n in sizes_for(backend):
        param, grad, buf = arrays(rng, n, dtype, 3)
        want_p, want_b = param.copy(), buf.copy()
        t = np.dtype(dtype).type
        ok.sgd_reference(want_p, grad, want_b, t(0.1), t(momentum), t(1 - dampening), t(weight_decay), nesterov, first)
        p, b = nbcoll.to_device(param), nbcoll.to_device(buf)
        ok.sgd_step(p, nbcoll.to_device(grad), b, 0.1, momentum, dampening, weight_decay, nesterov, first)
        # Same operations in the same order: equal up to a fused multiply-add on a real GPU.
        np.testing.assert_allclose(nbcoll.to_host(p), want_p, rtol=1e-6, atol=1e-7, err_msg=f"n={n}")
        np.testing.assert_allclose(nbcoll.to_host(b), want_b, rtol=1e-6, atol=1e-7, err_msg=f"n={n}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("decoupled, weight_decay, step", [(False, 0.0, 1), (False, 0.05, 3), (True, 0.01, 2)])
def test_adam_kernel_matches_reference(backend, rng, dtype, decoupled, weight_decay, step):
    for n in sizes_for(backend):
        param, grad, m = arrays(rng, n, dtype, 3)
        v = np.abs(arrays(rng, n, dtype, 1)[0])
        want = [param.copy(), m.copy(), v.copy()]
        with nbcoll.use_backend("numpy"):
            ok.adam_step(want[0], grad, want[1], want[2], 1e-2, step, 0.9, 0.99, 1e-8, weight_decay, decoupled)
        got = [nbcoll.to_device(a) for a in (param, m, v)]
        ok.adam_step(
            got[0], nbcoll.to_device(grad), got[1], got[2], 1e-2, step, 0.9, 0.99, 1e-8, weight_decay, decoupled
        )
        for name, g, w in zip(("param", "exp_avg", "exp_avg_sq"), got, want, strict=True):
            np.testing.assert_allclose(nbcoll.to_host(g), w, rtol=1e-6, atol=1e-7, err_msg=f"{name}, n={n}")


def test_kernels_check_their_arrays(backend):
    p = nbcoll.to_device(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="grad: expected shape"):
        ok.sgd_step(p, nbcoll.to_device(np.zeros(3, np.float32)), None, lr=0.1)
    with pytest.raises(ValueError, match="momentum_buffer"):
        ok.sgd_step(p, p, None, lr=0.1, momentum=0.9)
    with pytest.raises(TypeError, match="param.dtype"):
        ok.sgd_step(nbcoll.to_device(np.zeros(4, np.int32)), nbcoll.to_device(np.zeros(4, np.int32)), None, lr=0.1)
    with pytest.raises(ValueError, match="step: counts from 1"):
        ok.adam_step(p, p, nbcoll.zeros(4), nbcoll.zeros(4), lr=0.1, step=0)
