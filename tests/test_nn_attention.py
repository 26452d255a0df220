"""MultiheadAttention and TransformerBlock against NumPy written from their formulas, and their gradients."""

import numpy as np
import pytest
from layer_checks import assert_same_gradients_as_numpy, gradcheck_module, params, tensor64

import nbcoll
from nbcoll import nn


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def numpy_mha(query, key, value, p, heads, mask=None, prefix=""):
    """Batch-first multi-head attention; returns the output and the per-head weights (N, heads, L, S)."""

    def project(x, name):
        y = x @ p[f"{prefix}{name}.weight"].T + p[f"{prefix}{name}.bias"]
        n, length, width = y.shape
        return y.reshape(n, length, heads, width // heads).transpose(0, 2, 1, 3)

    q, k, v = project(query, "q_proj"), project(key, "k_proj"), project(value, "v_proj")
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    weights = softmax(scores if mask is None else scores + mask)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(query.shape[0], query.shape[1], -1)
    return out @ p[f"{prefix}out_proj.weight"].T + p[f"{prefix}out_proj.bias"], weights


def numpy_layer_norm(x, weight, bias, eps=1e-5):
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def numpy_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def numpy_block(x, p, heads, mask=None):
    h = numpy_layer_norm(x, p["ln1.weight"], p["ln1.bias"])
    x = x + numpy_mha(h, h, h, p, heads, mask, prefix="attn.")[0]
    h = numpy_layer_norm(x, p["ln2.weight"], p["ln2.bias"])
    h = numpy_gelu(h @ p["mlp.fc_in.weight"].T + p["mlp.fc_in.bias"])
    return x + h @ p["mlp.fc_out.weight"].T + p["mlp.fc_out.bias"]


def causal(length):
    return np.where(np.triu(np.ones((length, length), bool), 1), -np.inf, 0.0)


def mha(embed_dim=4, heads=2, **kwargs):
    return nn.MultiheadAttention(embed_dim, heads, dtype=np.float64, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# MultiheadAttention.


@pytest.mark.parametrize("batch_first", [True, False])
def test_self_attention_matches_numpy(backend, rng, batch_first):
    if backend != "numpy" and not batch_first:
        pytest.skip("the layout change is backend-independent; one simulator case is enough")
    attn = mha(batch_first=batch_first)
    x = rng.standard_normal((2, 3, 4))  # (N, L, E)
    fed = x if batch_first else x.transpose(1, 0, 2)
    out, weights = attn(nbcoll.tensor(np.ascontiguousarray(fed)))
    want, want_weights = numpy_mha(x, x, x, params(attn), 2)
    np.testing.assert_allclose(out.numpy(), want if batch_first else want.transpose(1, 0, 2), rtol=1e-10)
    np.testing.assert_allclose(weights.numpy(), want_weights.mean(axis=1), rtol=1e-10)


def test_causal_cross_attention_with_masks_matches_numpy(rng):
    # The masks are combined on the host, the same for every backend: NumPy only, the simulator runs attention above.
    with nbcoll.use_backend("numpy"):
        _check_causal_cross_attention_with_masks(rng)


def _check_causal_cross_attention_with_masks(rng):
    attn = mha(6, 3, batch_first=True, kdim=2, vdim=5)
    q, k, v = rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 5))
    padding = np.array([[False, False, True], [False, False, False]])
    float_mask = rng.standard_normal((3, 3))
    out, weights = attn(
        nbcoll.tensor(q), nbcoll.tensor(k), nbcoll.tensor(v), key_padding_mask=padding, attn_mask=float_mask,
        is_causal=True, average_attn_weights=False,
    )  # fmt: skip
    mask = causal(3) + float_mask + np.where(padding, -np.inf, 0)[:, None, None, :]
    want, want_weights = numpy_mha(q, k, v, params(attn), 3, mask)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(weights.numpy(), want_weights, rtol=1e-10)
    assert weights.shape == (2, 3, 3, 3)


def test_bool_and_per_head_masks_and_unbatched_input(rng):
    with nbcoll.use_backend("numpy"):
        attn = mha(4, 2)
        x = rng.standard_normal((3, 4))  # unbatched (L, E)
        hide = rng.random((2, 3, 3)) < 0.3
        hide[:, :, 0] = False  # every query keeps one key
        out, weights = attn(nbcoll.tensor(x), attn_mask=hide)
        want, want_weights = numpy_mha(x[None], x[None], x[None], params(attn), 2, np.where(hide, -np.inf, 0)[None])
        assert out.shape == (3, 4) and weights.shape == (3, 3)
        np.testing.assert_allclose(out.numpy(), want[0], rtol=1e-10)
        np.testing.assert_allclose(weights.numpy(), want_weights[0].mean(axis=0), rtol=1e-10)
        assert attn(nbcoll.tensor(x), need_weights=False)[1] is None


def test_causal_attention_never_looks_ahead(rng):
    with nbcoll.use_backend("numpy"):
        attn = mha(4, 2, batch_first=True)
        x = rng.standard_normal((1, 5, 4))
        later = x.copy()
        later[0, 3:] += 1.0
        a = attn(nbcoll.tensor(x), is_causal=True)[0].numpy()
        b = attn(nbcoll.tensor(later), is_causal=True)[0].numpy()
        np.testing.assert_allclose(a[0, :3], b[0, :3], rtol=1e-12)
        assert not np.allclose(a[0, 3:], b[0, 3:])


def test_separate_projections_for_a_later_split_of_heads():
    with nbcoll.use_backend("numpy"):
        names = [name for name, _ in mha(8, 2).named_parameters()]
        assert names == [f"{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")]


def test_attention_gradcheck(rng):
    with nbcoll.use_backend("numpy"):
        attn = mha(4, 2, batch_first=True, kdim=3)
        q, kv = tensor64(rng, 1, 3, 4), tensor64(rng, 1, 2, 3)

        class Cross(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = attn

            def forward(self, q, kv):
                return self.attn(q, kv, kv.reshape(1, 2, 3) @ nbcoll.tensor(np.eye(3, 4)), attn_mask=np.zeros((3, 2)))

        assert gradcheck_module(Cross(), [q, kv], atol=1e-6)


def test_causal_self_attention_gradcheck(rng):
    with nbcoll.use_backend("numpy"):
        attn = mha(4, 2)

        class Causal(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = attn

            def forward(self, x):
                return self.attn(x, is_causal=True)

        assert gradcheck_module(Causal(), [tensor64(rng, 3, 2, 4)], atol=1e-6)


def test_attention_gradients_on_the_device_backend_equal_numpy(rng):
    assert_same_gradients_as_numpy(lambda: mha(2, 1, batch_first=True), [rng.standard_normal((1, 2, 2))])


# ---------------------------------------------------------------------------------------------------------------
# TransformerBlock.


def test_transformer_block_matches_numpy(backend, rng):
    block = nn.TransformerBlock(4, 2, mlp_ratio=1.5, causal=True, dtype=np.float64)
    x = rng.standard_normal((1, 3, 4) if backend != "numpy" else (2, 5, 4))
    want = numpy_block(x, params(block), 2, causal(x.shape[1]))
    np.testing.assert_allclose(block(nbcoll.tensor(x)).numpy(), want, rtol=1e-10, atol=1e-12)


def test_transformer_block_gradcheck(rng):
    with nbcoll.use_backend("numpy"):
        block = nn.TransformerBlock(4, 2, mlp_ratio=1.0, causal=True, dtype=np.float64)
        assert gradcheck_module(block, [tensor64(rng, 2, 3, 4)], atol=1e-6)


def test_transformer_block_layout_and_dropout(rng):
    with nbcoll.use_backend("numpy"):
        block = nn.TransformerBlock(8, 2, dropout=0.5)
        shapes = {name: p.shape for name, p in block.named_parameters()}
        assert shapes["mlp.fc_in.weight"] == (32, 8) and shapes["mlp.fc_out.weight"] == (8, 32)
        assert shapes["attn.q_proj.weight"] == (8, 8) and "ln1.weight" in shapes and "ln2.bias" in shapes
        x = nbcoll.tensor(rng.standard_normal((1, 3, 8)).astype(np.float32))
        block.eval()
        np.testing.assert_array_equal(block(x).numpy(), block(x).numpy())
        block.train()
        assert not np.allclose(block(x).numpy(), block(x).numpy())


# ---------------------------------------------------------------------------------------------------------------
# Bad input.


def test_wrong_shapes_name_the_layer_the_expected_and_the_actual_shape():
    with nbcoll.use_backend("numpy"):
        attn = mha(4, 2, batch_first=True)
        with pytest.raises(ValueError, match=r"MultiheadAttention\(embed_dim=4, num_heads=2, batch_first=True\): "
                           r"expected query of shape \(N, length, 4\) or \(length, 4\), got \(2, 3, 5\)"):  # fmt: skip
            attn(nbcoll.tensor(np.zeros((2, 3, 5))))
        x = nbcoll.tensor(np.zeros((2, 3, 4)))
        with pytest.raises(ValueError, match=r"MultiheadAttention.*must share the batch size"):
            attn(x, x, nbcoll.tensor(np.zeros((2, 2, 4))))
        with pytest.raises(
            ValueError, match=r"MultiheadAttention.*expected attn_mask of shape \(3, 3\) or \(4, 3, 3\)"
        ):
            attn(x, attn_mask=np.zeros((2, 3)))
        with pytest.raises(ValueError, match=r"expected key_padding_mask of shape \(2, 3\), got \(2, 4\)"):
            attn(x, key_padding_mask=np.zeros((2, 4), bool))
        with pytest.raises(
            ValueError, match=r"TransformerBlock\(embed_dim=4.*expected input of shape \(N, L, 4\), got \(3, 4\)"
        ):
            nn.TransformerBlock(4, 2)(nbcoll.tensor(np.zeros((3, 4), np.float32)))
        with pytest.raises(ValueError, match="num_heads: must divide embed_dim=6"):
            nn.MultiheadAttention(6, 4)
