"""NumPy forward passes for the models that ``training_strategies`` draws, in float64, from the built layers' own
parameters: each layer kind written out from its documented formula, independent of nbcoll's kernels.

A training-mode Dropout's mask comes from the seed the layer draws: :func:`reference_forward` draws the same
seeds in the same order (``nbcoll.seed.next_seed``), so the caller restarts the generator before each pass.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from training_strategies import Layer, ModelSpec

from nbcoll import nn
from nbcoll.kernels.random import dropout_reference
from nbcoll.seed import next_seed

erf = np.vectorize(math.erf, otypes=[np.float64])


def _params(module: nn.Module) -> dict[str, np.ndarray]:
    return {name: p.numpy().astype(np.float64) for name, p in module.named_parameters()}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0),
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "gelu": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
    "gelu_tanh": gelu_tanh,
}


def linear(x: np.ndarray, p: dict[str, np.ndarray], prefix: str = "") -> np.ndarray:
    y = x @ p[prefix + "weight"].T
    return y + p[prefix + "bias"] if prefix + "bias" in p else y


def layer_norm(x: np.ndarray, p: dict[str, np.ndarray], prefix: str = "", eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    y = y * p[prefix + "weight"] if prefix + "weight" in p else y
    return y + p[prefix + "bias"] if prefix + "bias" in p else y


def _windows(x: np.ndarray, kernel, stride, padding, dilation, fill: float):
    """Each kernel tap (ky, kx) with the (N, C, OH, OW) input values it meets; padding reads ``fill``."""
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh = (padded.shape[2] - dh * (kh - 1) - 1) // stride[0] + 1
    ow = (padded.shape[3] - dw * (kw - 1) - 1) // stride[1] + 1
    for ky in range(kh):
        for kx in range(kw):
            rows = slice(ky * dh, ky * dh + stride[0] * (oh - 1) + 1, stride[0])
            cols = slice(kx * dw, kx * dw + stride[1] * (ow - 1) + 1, stride[1])
            yield ky, kx, padded[:, :, rows, cols]


def conv2d(x: np.ndarray, module: nn.Conv2d) -> np.ndarray:
    p, geometry = _params(module), (module.kernel_size, module.stride, module.padding, module.dilation)
    total = 0.0
    for ky, kx, window in _windows(x, *geometry, fill=0.0):
        total = total + np.einsum("nchw,oc->nohw", window, p["weight"][:, :, ky, kx])
    return total + p["bias"].reshape(-1, 1, 1) if "bias" in p else total


def max_pool2d(x: np.ndarray, module: nn.MaxPool2d) -> np.ndarray:
    geometry = (module.kernel_size, module.stride, module.padding, module.dilation)
    return np.max([window for _, _, window in _windows(x, *geometry, fill=-np.inf)], axis=0)


def recurrent(x: np.ndarray, module: nn.Module, options: dict[str, Any]) -> np.ndarray:
    """PyTorch's RNN / GRU / LSTM equations, layer by layer and step by step, from zero initial states."""
    p, mode, hidden = _params(module), options["mode"], options["hidden"]
    unbatched = x.ndim == 2
    seq = x[:, None] if unbatched else (x.transpose(1, 0, 2) if options["batch_first"] else x)  # (T, B, I)
    for layer in range(options["layers"]):
        w_ih, w_hh = p[f"weight_ih_l{layer}"], p[f"weight_hh_l{layer}"]
        b_ih, b_hh = p.get(f"bias_ih_l{layer}", 0.0), p.get(f"bias_hh_l{layer}", 0.0)
        h = c = np.zeros((seq.shape[1], hidden))
        outputs = []
        for x_t in seq:
            gi, gh = x_t @ w_ih.T + b_ih, h @ w_hh.T + b_hh
            if mode == "rnn":
                h = np.tanh(gi + gh) if options["nonlinearity"] == "tanh" else np.maximum(gi + gh, 0)
            elif mode == "lstm":
                i, f, g, o = np.split(gi + gh, 4, axis=-1)
                c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
                h = sigmoid(o) * np.tanh(c)
            else:
                (gi_r, gi_z, gi_n), (gh_r, gh_z, gh_n) = np.split(gi, 3, axis=-1), np.split(gh, 3, axis=-1)
                r, z = sigmoid(gi_r + gh_r), sigmoid(gi_z + gh_z)
                h = (1 - z) * np.tanh(gi_n + r * gh_n) + z * h
            outputs.append(h)
        seq = np.stack(outputs)
    if unbatched:
        return seq[:, 0]
    return seq.transpose(1, 0, 2) if options["batch_first"] else seq


def attention(x: np.ndarray, p: dict[str, np.ndarray], heads: int, causal: bool, prefix: str = "") -> np.ndarray:
    """Multi-head self-attention of (N, L, E) inputs: per head softmax(q k^T / sqrt(d) + mask) v, then out_proj."""
    n, length, embed = x.shape
    head_dim = embed // heads

    def split(name: str) -> np.ndarray:
        return linear(x, p, f"{prefix}{name}.").reshape(n, length, heads, head_dim).transpose(0, 2, 1, 3)

    scores = split("q_proj") @ split("k_proj").transpose(0, 1, 3, 2) / math.sqrt(head_dim)
    if causal:
        scores = scores + np.where(np.triu(np.ones((length, length), bool), k=1), -np.inf, 0.0)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    values = (weights @ split("v_proj")).transpose(0, 2, 1, 3).reshape(n, length, embed)
    return linear(values, p, f"{prefix}out_proj.")


def layer_forward(layer: Layer, module: nn.Module, x: np.ndarray) -> np.ndarray:
    o = layer.options
    if layer.kind == "linear":
        return linear(x, _params(module))
    if layer.kind == "activation":
        return ACTIVATIONS[o["name"]](x)
    if layer.kind == "layernorm":
        return layer_norm(x, _params(module))
    if layer.kind == "dropout":
        if not o["training"] or o["p"] == 0:
            return x
        _, keep = dropout_reference(np.zeros(x.shape), o["p"], next_seed())
        return np.where(keep != 0, x / (1 - o["p"]), 0.0)
    if layer.kind == "identity":
        return x
    if layer.kind == "residual":
        y = x
        for child, child_module in zip(layer.children[: o["block_length"]], module.block, strict=True):
            y = layer_forward(child, child_module, y)
        shortcut = x if module.projection is None else layer_forward(layer.children[-1], module.projection, x)
        return y + shortcut
    if layer.kind == "embedding":
        weight = _params(module)["weight"]
        keep = 1.0 if o["padding_idx"] is None else (x != module.padding_idx)[..., None]
        return weight[x] * keep
    if layer.kind == "conv":
        return conv2d(x, module)
    if layer.kind == "maxpool":
        return max_pool2d(x, module)
    if layer.kind == "recurrent":
        return recurrent(x, module.inner, o)
    if layer.kind == "attention":
        batch_major = x if o["batch_first"] else x.transpose(1, 0, 2)  # (N, L, E)
        y = attention(batch_major, _params(module.inner), o["heads"], o["causal"])
        return y if o["batch_first"] else y.transpose(1, 0, 2)
    if layer.kind == "transformer":
        p = _params(module)
        x = x + attention(layer_norm(x, p, "ln1."), p, o["heads"], o["causal"], "attn.")
        return x + linear(gelu_tanh(linear(layer_norm(x, p, "ln2."), p, "mlp.fc_in.")), p, "mlp.fc_out.")
    raise AssertionError(f"unknown layer kind {layer.kind!r}")


def reference_forward(spec: ModelSpec, model: nn.Sequential, x: np.ndarray) -> np.ndarray:
    """The model's output computed in float64 NumPy from its parameters (ids stay integers)."""
    y = x if spec.vocab else x.astype(np.float64)
    for layer, module in zip(spec.layers, model, strict=True):
        y = layer_forward(layer, module, y)
    return y
