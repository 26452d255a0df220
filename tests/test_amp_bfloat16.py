"""autocast in bfloat16: each product is computed as tensor cores do (bfloat16 inputs, a float32 accumulator, a
bfloat16 result), in forward and backward; other ops widen bfloat16 to float32; the masters stay float32."""

import ml_dtypes
import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll import nn
from nbcoll.nn.conv import conv2d

BF16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def bf16(a):
    """``a`` rounded to bfloat16 (round to nearest even), widened back to float32."""
    return np.asarray(a, np.float32).astype(BF16).astype(np.float32)


def test_a_product_rounds_inputs_to_bfloat16_accumulates_in_float32_and_rounds_the_result(rng):
    a, b = rng.standard_normal((2, 5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    x, w = nbcoll.tensor(a, requires_grad=True), nbcoll.tensor(b, requires_grad=True)
    with nbcoll.autocast(dtype=nbcoll.bfloat16):
        y = x @ w
    assert y.dtype == BF16 and y.grad_fn.function.__name__ == "BFloat16MatMul"
    np.testing.assert_array_equal(y.numpy().astype(np.float32), bf16(np.matmul(bf16(a), bf16(b))))
    dy = rng.standard_normal((2, 5, 3)).astype(np.float32)
    y.backward(nbcoll.tensor(dy).astype(nbcoll.bfloat16))
    assert x.grad.dtype == F32 and w.grad.dtype == F32
    np.testing.assert_array_equal(x.grad.numpy(), bf16(np.matmul(bf16(dy), bf16(b).T)))
    # w broadcast over the batch: its gradient is summed over it in float32, then rounded once.
    np.testing.assert_array_equal(w.grad.numpy(), bf16(np.matmul(bf16(a).transpose(0, 2, 1), bf16(dy)).sum(0)))


def test_a_result_feeds_the_next_ops_in_float32_and_conv2d_runs_in_bfloat16(rng):
    layer = nn.Linear(6, 4, bias=False)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    with nbcoll.autocast(dtype=nbcoll.bfloat16):
        h = layer(nbcoll.tensor(x))
        r = h.relu()  # bfloat16 is stored, not computed on: the ReLU reads it widened to float32
    assert h.dtype == BF16 and r.dtype == F32
    np.testing.assert_array_equal(r.numpy(), np.maximum(bf16(bf16(x) @ bf16(layer.weight.numpy()).T), 0))

    images, weight = rng.standard_normal((2, 3, 6, 5)).astype(np.float32), rng.standard_normal((4, 3, 3, 3))
    with nbcoll.autocast(dtype=nbcoll.bfloat16):
        got = conv2d(nbcoll.tensor(images), nbcoll.tensor(weight.astype(np.float32)), stride=2)
    want = conv2d(nbcoll.tensor(bf16(images)), nbcoll.tensor(bf16(weight)), stride=2).numpy()
    assert got.dtype == F32  # the product is bfloat16; the reshape after it reads it widened
    np.testing.assert_array_equal(got.numpy(), bf16(want))


def test_an_mlp_keeps_float32_masters_and_gets_float32_gradients(rng):
    nbcoll.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = rng.standard_normal((6, 5)).astype(np.float32), np.array([0, 1, 2, 0, 1, 2])
    with nbcoll.autocast(dtype=nbcoll.bfloat16):
        logits = model(nbcoll.tensor(x))
        loss = F.cross_entropy(logits, y)
    assert logits.dtype == F32 and loss.dtype == F32  # the float32 bias promotes the product
    loss.backward()
    with nbcoll.autocast(dtype=np.float16):
        F.cross_entropy(model(nbcoll.tensor(x)), y).backward()  # accumulates onto the same float32 gradients
    assert all(p.dtype == F32 and p.grad.dtype == F32 for p in model.parameters())
    assert all(np.isfinite(p.grad.numpy()).all() and np.abs(p.grad.numpy()).max() > 0 for p in model.parameters())
