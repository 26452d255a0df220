"""autocast (float16): which ops run in which dtype, the values they give, the gradients they send back, and the
float32 masters the optimizer steps. The bfloat16 path and the GradScaler have their own files."""

import threading

import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll import nn
from nbcoll.nn.conv import conv2d

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def rounded(a, dtype=np.float16):
    """``a`` rounded to ``dtype`` and widened back to float32: what a low-precision op reads."""
    return np.asarray(a, np.float32).astype(dtype).astype(np.float32)


def test_a_product_runs_in_float16_and_matches_rounded_inputs_with_a_float32_accumulator(rng):
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    x, w = nbcoll.tensor(a, requires_grad=True), nbcoll.tensor(b, requires_grad=True)
    with nbcoll.autocast(dtype=np.float16):
        y = x @ w
    assert y.dtype == F16
    np.testing.assert_array_equal(y.numpy(), (rounded(a) @ rounded(b)).astype(np.float16))
    dy = rng.standard_normal((5, 3)).astype(np.float32)
    y.backward(nbcoll.tensor(dy.astype(np.float16)))
    # The product's backward runs in float16; the casts send each gradient back in its input's dtype.
    assert x.grad.dtype == F32 and w.grad.dtype == F32
    np.testing.assert_array_equal(x.grad.numpy(), rounded(rounded(dy) @ rounded(b).T))
    np.testing.assert_array_equal(w.grad.numpy(), rounded(rounded(a).T @ rounded(dy)))


def test_linear_batched_matmul_and_conv2d_compute_their_products_in_float16(rng):
    layer = nn.Linear(6, 4)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    with nbcoll.autocast():
        y = layer(nbcoll.tensor(x))
    # The product is float16; its bias is added after it, so the float32 bias promotes the sum (PyTorch's rule).
    product = (rounded(x) @ rounded(layer.weight.numpy()).T).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(y.numpy(), product + layer.bias.numpy())

    a, b = rng.standard_normal((2, 3, 4, 5)).astype(np.float32), rng.standard_normal((3, 5, 2)).astype(np.float32)
    with nbcoll.autocast():
        batched = nbcoll.tensor(a) @ nbcoll.tensor(b)
    assert batched.dtype == F16 and batched.shape == (2, 3, 4, 2)
    np.testing.assert_array_equal(batched.numpy(), np.matmul(rounded(a), rounded(b)).astype(np.float16))

    images, weight = rng.standard_normal((2, 3, 7, 5)).astype(np.float32), rng.standard_normal((4, 3, 3, 3))
    with nbcoll.autocast():
        got = conv2d(nbcoll.tensor(images), nbcoll.tensor(weight.astype(np.float32)), padding=1)
    want = conv2d(nbcoll.tensor(rounded(images)), nbcoll.tensor(rounded(weight)), padding=1).numpy()
    assert got.dtype == F16
    np.testing.assert_array_equal(got.numpy(), want.astype(np.float16))


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x.sum(axis=1),
        lambda x: x.mean(),
        lambda x: x.softmax(axis=-1),
        lambda x: x.log_softmax(axis=-1),
        lambda x: F.layer_norm(x),
        lambda x: x.exp(),
        lambda x: F.cross_entropy(x, [0, 2, 1]),
        lambda x: F.mse_loss(x, nbcoll.tensor(np.ones((3, 4), np.float32))),
    ],
    ids=["sum", "mean", "softmax", "log_softmax", "layer_norm", "exp", "cross_entropy", "mse_loss"],
)
def test_reductions_softmax_norms_and_losses_run_in_float32(rng, op):
    data = rng.standard_normal((3, 4)).astype(np.float16)
    x = nbcoll.tensor(data, requires_grad=True)
    with nbcoll.autocast():
        y = op(x)
    assert y.dtype == F32
    np.testing.assert_allclose(y.numpy(), op(nbcoll.tensor(data.astype(np.float32))).numpy(), rtol=1e-6, atol=1e-7)
    y.sum().backward()
    assert x.grad.dtype == F16  # back through the cast, in the input's dtype


def test_elementwise_ops_keep_their_dtype_and_float64_is_never_cast(rng):
    h = nbcoll.tensor(rng.standard_normal(4).astype(np.float16))
    d = nbcoll.tensor(rng.standard_normal((2, 2)))
    with nbcoll.autocast():
        assert h.relu().dtype == F16 and (h * 2.0).dtype == F16
        assert (d @ d).dtype == np.float64 and d.sum().dtype == np.float64
    with pytest.raises(TypeError, match="same dtype"):
        h + nbcoll.tensor(np.ones(4, np.float32))  # outside autocast mixed dtypes are still refused


def test_masters_stay_float32_and_the_optimizer_steps_them(rng):
    nbcoll.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = rng.standard_normal((6, 5)).astype(np.float32), np.array([0, 1, 2, 0, 1, 2])
    before = [p.numpy().copy() for p in model.parameters()]
    optimizer = nbcoll.optim.SGD(model.parameters(), lr=0.5)
    with nbcoll.autocast():
        loss = F.cross_entropy(model(nbcoll.tensor(x)), y)
    loss.backward()
    assert all(p.dtype == F32 and p.grad.dtype == F32 for p in model.parameters())
    # The same casts written out by hand, outside autocast: the gradients agree bit for bit.
    w1, b1, w2, b2 = (nbcoll.tensor(p, requires_grad=True) for p in before)
    h = (nbcoll.tensor(x).astype(F16) @ w1.astype(F16).T).astype(F32) + b1
    out = (h.relu().astype(F16) @ w2.astype(F16).T).astype(F32) + b2
    F.cross_entropy(out, y).backward()
    for p, ref in zip(model.parameters(), (w1, b1, w2, b2), strict=True):
        np.testing.assert_array_equal(p.grad.numpy(), ref.grad.numpy())
    optimizer.step()
    for p, start in zip(model.parameters(), before, strict=True):
        assert p.dtype == F32
        np.testing.assert_array_equal(p.numpy(), start - np.float32(0.5) * p.grad.numpy())


def test_disabled_nested_decorated_and_restored_after_an_error(rng):
    x = nbcoll.tensor(rng.standard_normal((2, 2)).astype(np.float32))
    with nbcoll.autocast():
        with nbcoll.autocast(enabled=False):
            assert (x @ x).dtype == F32
        assert (x @ x).dtype == F16
    with pytest.raises(RuntimeError), nbcoll.autocast():
        raise RuntimeError("inside")
    assert (x @ x).dtype == F32

    @nbcoll.autocast(dtype=np.float16)
    def product(a):
        return a @ a

    assert product(x).dtype == F16 and (x @ x).dtype == F32


def test_autocast_is_per_thread(rng):
    x = nbcoll.tensor(rng.standard_normal((2, 2)).astype(np.float32))
    seen, entered, done = [], threading.Event(), threading.Event()

    def other():
        entered.wait()
        seen.append((x @ x).dtype)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with nbcoll.autocast():
        entered.set()
        done.wait(10)
    thread.join()
    assert seen == [F32]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, "nonsense"])
def test_autocast_refuses_dtypes_it_cannot_compute_in(dtype):
    with pytest.raises(TypeError, match="dtype: expected float16 or bfloat16"):
        nbcoll.autocast(dtype=dtype)
    with pytest.raises(TypeError, match="enabled"):
        nbcoll.autocast(enabled=1)
