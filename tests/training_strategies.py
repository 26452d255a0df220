"""Hypothesis strategies that draw small models for the training property tests, and the code that builds them.

A drawn model is a :class:`ModelSpec`: the input's shape and dtype and a list of :class:`Layer` descriptions, each
a kind and its constructor settings. :func:`build` turns a spec into an ``nn.Sequential`` (parameters from a seed);
``training_references.reference_forward`` walks the same spec in NumPy, reading the built layers' parameters.

Shapes are tracked while drawing, so every drawn stack runs: each layer is drawn for the width (last axis) or the
image size its predecessor leaves. Values are not drawn by Hypothesis: inputs come from a NumPy generator seeded by
a drawn integer, so examples stay cheap and shrink by structure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import nbcoll
from nbcoll import nn

FAMILIES = ("dense", "embedding", "conv", "recurrent", "attention")
"""What the first layer of a model reads: features, token ids, images, sequences, or sequences to attend over."""


@dataclass
class Layer:
    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    children: list[Layer] = field(default_factory=list)  # a residual's block (then its projection, if any)


@dataclass
class ModelSpec:
    family: str
    input_shape: tuple[int, ...]
    dtype: str
    layers: list[Layer]
    vocab: int = 0  # > 0: the input is integer ids in [0, vocab)

    def make_input(self, rng: np.random.Generator) -> np.ndarray:
        """An input of the spec's shape: ids for an embedding, else standard normal values in the model's dtype."""
        if self.vocab:
            return rng.integers(0, self.vocab, self.input_shape)
        return rng.standard_normal(self.input_shape).astype(self.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Building.


class SequenceOutputs(nn.Module):
    """The first output of a layer that returns several (a recurrent layer's outputs, attention's values)."""

    def __init__(self, inner: nn.Module, **call_options: Any) -> None:
        super().__init__()
        self.inner, self.call_options = inner, call_options

    def forward(self, x: Any) -> Any:
        return self.inner(x, **self.call_options)[0]


ACTIVATIONS = {
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
}


def build_layer(layer: Layer, dtype: str) -> nn.Module:
    o = layer.options
    if layer.kind == "linear":
        return nn.Linear(o["in"], o["out"], bias=o["bias"], dtype=dtype)
    if layer.kind == "activation":
        return ACTIVATIONS[o["name"]]()
    if layer.kind == "layernorm":
        return nn.LayerNorm(o["shape"], elementwise_affine=o["affine"], bias=o["bias"], dtype=dtype)
    if layer.kind == "dropout":
        return nn.Dropout(o["p"]).train(o["training"])
    if layer.kind == "identity":
        return nn.Identity()
    if layer.kind == "residual":
        block = nn.Sequential(*(build_layer(child, dtype) for child in layer.children[: o["block_length"]]))
        rest = layer.children[o["block_length"] :]
        return nn.Residual(block, build_layer(rest[0], dtype) if rest else None)
    if layer.kind == "embedding":
        return nn.Embedding(o["num"], o["dim"], padding_idx=o["padding_idx"], dtype=dtype)
    if layer.kind == "conv":
        settings = {k: o[k] for k in ("stride", "padding", "dilation", "bias")}
        return nn.Conv2d(o["in"], o["out"], o["kernel"], dtype=dtype, **settings)
    if layer.kind == "maxpool":
        return nn.MaxPool2d(o["kernel"], stride=o["stride"], padding=o["padding"], dilation=o["dilation"])
    if layer.kind == "recurrent":
        kind = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}[o["mode"]]
        extra = {"nonlinearity": o["nonlinearity"]} if o["mode"] == "rnn" else {}
        inner = kind(
            o["in"], o["hidden"], o["layers"], bias=o["bias"], batch_first=o["batch_first"], dtype=dtype, **extra
        )
        return SequenceOutputs(inner)
    if layer.kind == "attention":
        inner = nn.MultiheadAttention(o["embed"], o["heads"], bias=o["bias"], batch_first=o["batch_first"], dtype=dtype)
        return SequenceOutputs(inner, is_causal=o["causal"], need_weights=False)
    if layer.kind == "transformer":
        return nn.TransformerBlock(o["embed"], o["heads"], mlp_ratio=o["mlp_ratio"], causal=o["causal"], dtype=dtype)
    raise AssertionError(f"unknown layer kind {layer.kind!r}")


def build(spec: ModelSpec, seed: int) -> nn.Sequential:
    """The spec's model, with parameters drawn after ``nbcoll.manual_seed(seed)``; each Dropout keeps its mode."""
    nbcoll.manual_seed(seed)
    return nn.Sequential(*(build_layer(layer, spec.dtype) for layer in spec.layers))


# ---------------------------------------------------------------------------------------------------------------
# Drawing: each strategy returns the layers it drew and the width (last axis) they leave.
#
# Every choice lists its values with a typical one first: Hypothesis starts from (and shrinks towards) the first
# value of each choice, so its first example is a real model (batch 2, two linear layers) instead of an empty one.


def choice(*values: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


def size(low: int, high: int, simplest: int) -> st.SearchStrategy[int]:
    """An integer in [low, high], ``simplest`` first."""
    return choice(simplest, *(v for v in range(low, high + 1) if v != simplest))


def flag(simplest: bool = True) -> st.SearchStrategy[bool]:
    return choice(simplest, not simplest)


@st.composite
def dense_layer(draw: Any, width: int, nested: bool = False) -> tuple[Layer, int]:
    # Linear twice: the layer with the most to get wrong is drawn most often.
    kinds = ["linear", "activation", "layernorm", "linear", "dropout", "identity"] + ([] if nested else ["residual"])
    kind = draw(choice(*kinds))
    if kind == "linear":
        out = draw(size(1, 4, simplest=3))
        return Layer("linear", {"in": width, "out": out, "bias": draw(flag())}), out
    if kind == "activation":
        return Layer("activation", {"name": draw(choice(*ACTIVATIONS))}), width
    if kind == "layernorm":
        affine = draw(flag())
        return Layer("layernorm", {"shape": width, "affine": affine, "bias": affine and draw(flag())}), width
    if kind == "dropout":
        return Layer("dropout", {"p": draw(choice(0.25, 0.0, 0.5)), "training": draw(flag())}), width
    if kind == "identity":
        return Layer("identity"), width
    # A residual: a block of one or two layers that keeps the width, or changes it with a projection beside it.
    first = draw(dense_layer(width, nested=True))
    block, out = [first[0]], first[1]
    if draw(flag()):
        second, out = draw(dense_layer(out, nested=True))
        block.append(second)
    children = list(block)
    if out != width:
        children.append(Layer("linear", {"in": width, "out": out, "bias": draw(flag())}))
    return Layer("residual", {"block_length": len(block)}, children), out


@st.composite
def dense_stack(draw: Any, width: int, min_layers: int, max_layers: int) -> tuple[list[Layer], int]:
    layers = []
    for _ in range(draw(size(min_layers, max_layers, simplest=min(2, max_layers)))):
        layer, width = draw(dense_layer(width))
        layers.append(layer)
    return layers, width


def window_reads_input(size: int, kernel: int, stride: int, padding: int, dilation: int) -> bool:
    """Whether every window along one axis has a tap inside the input, not only in the padding."""
    outputs = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    windows = [[o * stride - padding + k * dilation for k in range(kernel)] for o in range(outputs)]
    return all(any(0 <= tap < size for tap in window) for window in windows)


@st.composite
def image_layers(draw: Any, channels: int, height: int, width: int) -> tuple[list[Layer], tuple[int, int, int]]:
    """One or two convolutions or poolings (an activation may follow each) that fit the image they are given."""
    layers: list[Layer] = []
    for _ in range(draw(size(1, 2, simplest=2))):
        kernel = (draw(size(1, 3, simplest=2)), draw(size(1, 3, simplest=2)))
        stride, dilation = draw(size(1, 2, simplest=1)), draw(size(1, 2, simplest=1))
        if draw(choice("conv", "maxpool")) == "conv":
            padding = draw(size(0, 1, simplest=1))
            layer = Layer("conv", {"in": channels, "out": draw(size(1, 2, simplest=2)), "kernel": kernel,
                                   "stride": stride, "padding": padding, "dilation": dilation,
                                   "bias": draw(flag())})  # fmt: skip
        else:
            padding = draw(size(0, min(kernel) // 2, simplest=0))  # MaxPool2d: at most half the kernel
            layer = Layer("maxpool", {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation})
        sizes = list(zip((height, width), kernel, strict=True))
        out_hw = [(n + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for n, k in sizes]
        if min(out_hw) < 1:
            continue  # the window does not fit the image: leave this layer out
        if layer.kind == "maxpool" and not all(window_reads_input(n, k, stride, padding, dilation) for n, k in sizes):
            # A dilated window can fall entirely in the padding: MaxPool2d gives -inf there, as PyTorch does, and
            # the layers after it would turn that into NaN; tests/test_im2col_pool.py checks that case on its own.
            continue
        layers.append(layer)
        channels, (height, width) = layer.options.get("out", channels), out_hw
        if draw(flag()):
            layers.append(Layer("activation", {"name": draw(choice(*ACTIVATIONS))}))
    return layers, (channels, height, width)


@st.composite
def models(
    draw: Any,
    family: str,
    dtypes: tuple[str, ...] = ("float32", "float64"),
    min_batch: int = 0,
    max_batch: int = 3,
    max_tail: int = 3,
) -> ModelSpec:
    """A random small model of ``family``: its first layers, then up to ``max_tail`` dense layers on the last axis."""
    dtype = draw(choice(*dtypes))
    batch = draw(size(min_batch, max_batch, simplest=min(2, max_batch)))
    vocab, layers = 0, []
    if family == "dense":
        width = draw(size(1, 4, simplest=3))
        input_shape = draw(choice((batch, draw(size(1, 3, simplest=2)), width), (batch, width)))
    elif family == "embedding":
        vocab, width = draw(size(2, 6, simplest=5)), draw(size(1, 4, simplest=3))
        padding_idx = draw(st.none() | st.integers(-vocab, vocab - 1))
        input_shape = (batch, draw(size(1, 3, simplest=2)))
        layers.append(Layer("embedding", {"num": vocab, "dim": width, "padding_idx": padding_idx}))
    elif family == "conv":
        input_shape = (batch, draw(size(1, 2, simplest=2)), draw(size(3, 5, simplest=4)), draw(size(3, 5, simplest=4)))
        image, (_, _, width) = draw(image_layers(*input_shape[1:]))
        layers += image
    elif family == "recurrent":
        steps, width, hidden = (draw(size(1, 3, simplest=2)) for _ in range(3))
        mode, batch_first = draw(choice("lstm", "gru", "rnn")), draw(flag(simplest=False))
        layout = draw(choice("batched", "unbatched"))
        input_shape = ((batch, steps) if batch_first else (steps, batch)) if layout == "batched" else (steps,)
        input_shape = (*input_shape, width)
        layers.append(Layer("recurrent", {"mode": mode, "in": width, "hidden": hidden, "bias": draw(flag()),
                                          "layers": draw(size(1, 2, simplest=2)), "batch_first": batch_first,
                                          "nonlinearity": draw(choice("tanh", "relu"))}))  # fmt: skip
        width = hidden
    else:
        width, length = draw(choice(4, 2)), draw(size(1, 3, simplest=3))
        heads, causal = draw(choice(2, 1)), draw(flag())
        if draw(choice("attention", "transformer")) == "attention":
            batch_first = draw(flag(simplest=False))
            input_shape = (batch, length, width) if batch_first else (length, batch, width)
            layers.append(Layer("attention", {"embed": width, "heads": heads, "bias": draw(flag()),
                                              "batch_first": batch_first, "causal": causal}))  # fmt: skip
        else:
            input_shape = (batch, length, width)
            layers.append(Layer("transformer", {"embed": width, "heads": heads, "causal": causal,
                                                "mlp_ratio": draw(choice(1.0, 0.5))}))  # fmt: skip
    tail, _ = draw(dense_stack(width, min(1 if family == "dense" else 0, max_tail), max_tail))
    return ModelSpec(family, input_shape, dtype, layers + tail, vocab)


def parameter_count(model: nn.Module) -> int:
    return sum(int(np.prod(p.shape)) for p in model.parameters())
