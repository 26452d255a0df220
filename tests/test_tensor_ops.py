"""Every Tensor operation's forward against NumPy, on the simulator (tiny shapes) and on the numpy backend."""

import numpy as np
import pytest

import nbcoll.functional as F
from nbcoll.tensors import Tensor, tensor


def _close(t: Tensor, expected, dtype=None, rtol=1e-5, atol=1e-6):
    expected = np.asarray(expected)
    assert isinstance(t, Tensor)
    assert t.shape == expected.shape
    if dtype is not None:
        assert t.dtype == np.dtype(dtype)
    np.testing.assert_allclose(t.numpy(), expected, rtol=rtol, atol=atol)


def test_creation_and_metadata(backend):
    x = tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert (x.shape, x.ndim, x.size, x.dtype) == ((2, 3), 2, 6, np.float32)
    assert tensor([1, 2]).dtype == np.int64
    assert tensor([1, 2], dtype=np.float64).dtype == np.float64
    assert tensor(np.zeros(3, np.float16)).dtype == np.float16
    assert tensor(2.5).shape == () and tensor(2.5).item() == 2.5
    assert isinstance(x.numpy(), np.ndarray) and len(x) == 2
    assert not x.requires_grad and x.grad is None and x.is_leaf
    assert "tensor(" in repr(x) and "requires_grad=True" in repr(tensor([1.0], requires_grad=True))
    with pytest.raises(ValueError, match="one-element"):
        x.item()
    with pytest.raises(TypeError, match="floating"):
        tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="not supported"):
        tensor(np.zeros(2, np.int16))


def test_numpy_input_is_copied(backend):
    host = np.arange(3, dtype=np.float32)
    x = tensor(host)
    host[0] = 10
    assert x.numpy()[0] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_arithmetic_operators_broadcast_with_scalars(backend, rng, dtype):
    a_host = rng.uniform(0.5, 2.0, (2, 3)).astype(dtype)
    b_host = rng.uniform(0.5, 2.0, (3,)).astype(dtype)
    a, b = tensor(a_host), tensor(b_host)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    _close(a + b, a_host + b_host, dtype, rtol)
    _close(a - b, a_host - b_host, dtype, rtol)
    _close(a * b, a_host * b_host, dtype, rtol)
    _close(a / b, a_host / b_host, dtype, rtol)
    _close(a**b, a_host**b_host, dtype, rtol)
    _close(a @ b, a_host @ b_host, dtype, rtol)
    _close(-a, -a_host, dtype)
    _close(2 - a, 2 - a_host, dtype, rtol)
    _close(a * 3, a_host * 3, dtype, rtol)
    _close(1 / a, 1 / a_host, dtype, rtol)
    _close(a**2, a_host**2, dtype, rtol)
    _close(2.0**b, 2.0**b_host, dtype, rtol)
    _close(np.float64(2.0) + a, 2.0 + a_host, dtype, rtol)


def test_integer_tensors(backend):
    a, b = tensor(np.array([[1, -2, 3]], np.int32)), tensor(np.array([[4], [5]], np.int32))
    _close(a + b, [[5, 2, 7], [6, 3, 8]], np.int32)
    _close(a * 2, [[2, -4, 6]], np.int32)
    _close(a.abs(), [[1, 2, 3]], np.int32)
    _close(a.sum(), 2)
    with pytest.raises(TypeError, match="floating"):
        a.exp()
    with pytest.raises(TypeError, match="same dtype"):
        a + tensor([1.0])


def test_comparisons_give_bool_tensors_without_grad(backend):
    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    for result, expected in [
        (x > 2, [False, False, True]),
        (x >= 2, [False, True, True]),
        (x < 2, [True, False, False]),
        (x <= 2, [True, True, False]),
        (x == tensor([1.0, 0.0, 3.0]), [True, False, True]),
        (x != 2, [True, False, True]),
        (2 < x, [False, False, True]),
    ]:
        assert result.dtype == np.bool_ and not result.requires_grad
        np.testing.assert_array_equal(result.numpy(), expected)


def test_unary_methods(backend, rng):
    host = rng.uniform(0.2, 2.0, (2, 3)).astype(np.float32)
    signed = (host - 1.1).astype(np.float32)
    x, s = tensor(host), tensor(signed)
    _close(x.exp(), np.exp(host))
    _close(x.log(), np.log(host))
    _close(x.sqrt(), np.sqrt(host))
    _close(s.tanh(), np.tanh(signed))
    _close(s.sigmoid(), 1 / (1 + np.exp(-signed)))
    _close(s.relu(), np.maximum(signed, 0))
    _close(s.abs(), np.abs(signed))
    gelu = 0.5 * signed * (1 + np.tanh(np.sqrt(2 / np.pi) * (signed + 0.044715 * signed**3)))
    _close(s.gelu(), gelu, atol=1e-6)
    _close(F.gelu(s), gelu, atol=1e-6)
    _close(F.exp(x), np.exp(host))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(backend, rng, axis, keepdims):
    host = rng.standard_normal((2, 3, 2))
    x = tensor(host, dtype=np.float64)
    _close(x.sum(axis=axis, keepdims=keepdims), host.sum(axis=axis, keepdims=keepdims))
    _close(x.mean(axis, keepdims), host.mean(axis=axis, keepdims=keepdims))
    _close(x.max(axis=axis, keepdims=keepdims), host.max(axis=axis, keepdims=keepdims))
    _close(x.min(axis=axis, keepdims=keepdims), host.min(axis=axis, keepdims=keepdims))
    if not isinstance(axis, tuple):
        result = x.argmax(axis=axis, keepdims=keepdims)
        assert result.dtype == np.int64 and not result.requires_grad
        np.testing.assert_array_equal(result.numpy(), np.argmax(host, axis=axis, keepdims=keepdims))


def test_softmax_and_log_softmax(backend, rng):
    host = rng.standard_normal((2, 3)).astype(np.float32) * 5
    x = tensor(host)
    shifted = host - host.max(axis=-1, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    _close(x.softmax(), expected)
    _close(x.log_softmax(axis=-1), np.log(expected), atol=1e-5)
    column = np.exp(host - host.max(0)) / np.exp(host - host.max(0)).sum(0)
    _close(F.softmax(x, axis=0), column)


def test_reshape_and_transpose_call_forms(backend):
    host = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    x = tensor(host)
    _close(x.reshape(3, -1), host.reshape(3, -1))
    _close(x.reshape((6,)), host.reshape(6))
    _close(x.reshape(()) if x.size == 1 else x.flatten(), host.reshape(-1))
    _close(x.transpose(), host.transpose())
    _close(x.transpose(1, 0, 2), host.transpose(1, 0, 2))
    _close(x.transpose((2, 0, 1)), host.transpose(2, 0, 1))
    _close(x.reshape(2, 3).T, host.reshape(2, 3).T)
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape(4, -1)
    with pytest.raises(ValueError, match="permutation"):
        x.transpose(0, 0, 1)


@pytest.mark.parametrize(
    "key",
    [
        1,
        -1,
        (slice(None), slice(2, 5)),
        slice(None, None, 2),
        (Ellipsis, -1),
        (None, 0),
        (slice(None, None, -1), 1),
        (1, slice(1, None, 2)),
    ],
    ids=["int", "negative", "column-slice", "step", "ellipsis", "newaxis", "reverse", "int-and-slice"],
)
def test_basic_indexing(backend, key):
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    _close(tensor(host)[key], host[key])


def test_indexing_errors(backend):
    x = tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(IndexError, match="out of bounds"):
        x[2]
    with pytest.raises(IndexError, match="too many"):
        x[0, 0, 0]
    with pytest.raises(TypeError, match="index: expected integers, slices"):
        x[1.5]


def test_gather_scatter_add_index_select(backend):
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = tensor(host)
    index = np.array([[0, 2], [1, 0]])
    _close(x.gather(index, axis=1), np.take_along_axis(host, index, axis=1))
    src = tensor(np.ones((2, 2), np.float32))
    expected = host.copy()
    np.add.at(expected, (np.arange(2)[:, None], index), 1)
    _close(x.scatter_add(index, src, axis=1), expected)
    _close(x.index_select(1, [2, 0]), host[:, [2, 0]])
    _close(F.index_select(x, 0, tensor([1])), host[[1]])


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((2, 3), (3, 2)), ((2, 1, 2, 3), (2, 3, 1)), ((3,), (3, 2)), ((2, 3), (3,)), ((3,), (3,))],
)
def test_matmul_shapes(backend, rng, a_shape, b_shape):
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    _close(tensor(a, dtype=np.float64) @ tensor(b, dtype=np.float64), a @ b)
    _close(F.matmul(tensor(a, dtype=np.float64), tensor(b, dtype=np.float64)), a @ b)


def test_matmul_shape_mismatch(backend):
    with pytest.raises(ValueError):
        tensor(np.zeros((2, 3), np.float32)) @ tensor(np.zeros((2, 3), np.float32))


def test_losses_and_layers(backend, rng):
    logits = rng.standard_normal((3, 4))
    targets = np.array([0, 3, 1])
    log_p = logits - logits.max(1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(1, keepdims=True))
    _close(F.cross_entropy(tensor(logits, dtype=np.float64), targets), -log_p[np.arange(3), targets].mean())
    pred, target = rng.standard_normal(4), rng.standard_normal(4)
    _close(F.mse_loss(tensor(pred, dtype=np.float64), tensor(target, dtype=np.float64)), ((pred - target) ** 2).mean())
    weight = rng.standard_normal((5, 2)).astype(np.float32)
    ids = np.array([[4, 0], [0, 2]])
    _close(F.embedding(ids, tensor(weight)), weight[ids])
    x = rng.standard_normal((2, 4))
    normalized = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    w, b = rng.standard_normal(4), rng.standard_normal(4)
    _close(
        F.layer_norm(tensor(x, dtype=np.float64), tensor(w, dtype=np.float64), tensor(b, dtype=np.float64)),
        normalized * w + b,
        atol=1e-6,
    )
    _close(F.layer_norm(tensor(x, dtype=np.float64)), normalized, atol=1e-6)


def test_dropout_is_reproducible_and_scaled(backend):
    x = tensor(np.ones((4, 5), np.float32))
    y1, y2 = F.dropout(x, p=0.5, seed=7), F.dropout(x, p=0.5, seed=7)
    np.testing.assert_array_equal(y1.numpy(), y2.numpy())
    assert set(np.unique(y1.numpy())) <= {0.0, 2.0}
    assert F.dropout(x, p=0.5, seed=7, training=False) is x
    with pytest.raises(ValueError, match="probability"):
        F.dropout(x, p=1.0)


def test_astype_and_iteration(backend):
    x = tensor([1.5, -2.5, 3.0], requires_grad=True)
    y = x.astype(np.float64)
    assert y.dtype == np.float64 and y.requires_grad
    y.sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 1])
    as_int = x.astype(np.int32)
    assert as_int.dtype == np.int32 and not as_int.requires_grad
    np.testing.assert_array_equal(as_int.numpy(), [1, -2, 3])
    assert [row.tolist() for row in tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]
    with pytest.raises(TypeError, match="0-d"):
        iter(tensor(1.0))
