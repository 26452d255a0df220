"""Function forms of the Tensor operations, plus the losses and layers built from them.

Example::

    import nbcoll.functional as F
    logits = x @ w + b
    loss = F.cross_entropy(logits, targets)          # mean over the batch of -log softmax(logits)[target]
    loss.backward()

Every function takes Tensors (Python scalars are accepted where a Tensor method accepts them) and returns a
Tensor that records its graph unless ``no_grad`` is active.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.tensors.ops import elementwise as ew
from nbcoll.tensors.ops import indexing, join, nn, select
from nbcoll.tensors.ops import matmul as matmul_ops
from nbcoll.tensors.tensor import Tensor, tensor


def _tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


# -- elementwise ----------------------------------------------------------------------------------------------


def add(a: Any, b: Any) -> Tensor:
    return _tensor(a) + b


def sub(a: Any, b: Any) -> Tensor:
    return _tensor(a) - b


def mul(a: Any, b: Any) -> Tensor:
    return _tensor(a) * b


def div(a: Any, b: Any) -> Tensor:
    return _tensor(a) / b


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - the operator's name
    return _tensor(a) ** b


def neg(x: Tensor) -> Tensor:
    return -x


def exp(x: Tensor) -> Tensor:
    return x.exp()


def log(x: Tensor) -> Tensor:
    return x.log()


def sqrt(x: Tensor) -> Tensor:
    return x.sqrt()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def relu(x: Tensor) -> Tensor:
    return x.relu()


def gelu(x: Tensor) -> Tensor:
    """GELU in its tanh form (PyTorch's ``approximate="tanh"``): ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715
    * x**3)))``, within about 1e-3 of the erf form."""
    return ew.gelu(x)


def abs(x: Tensor) -> Tensor:  # noqa: A001
    return x.abs()


# -- reductions, products, softmax ------------------------------------------------------------------------------


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return x.sum(axis=axis, keepdims=keepdims)


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return x.mean(axis=axis, keepdims=keepdims)


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return x.max(axis=axis, keepdims=keepdims)


def min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return x.min(axis=axis, keepdims=keepdims)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    return x.argmax(axis=axis, keepdims=keepdims)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy's ``a @ b``: batch dimensions broadcast, 1-D operands are promoted then squeezed."""
    return matmul_ops.matmul(*_tensor(a)._operands(b))


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.softmax(axis=axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.log_softmax(axis=axis)


# -- shape and indexing -----------------------------------------------------------------------------------------


def reshape(x: Tensor, shape: Any) -> Tensor:
    return x.reshape(shape)


def transpose(x: Tensor, axes: Any = None) -> Tensor:
    return x.transpose() if axes is None else x.transpose(axes)


def permute(x: Tensor, axes: Any) -> Tensor:
    """NumPy's ``transpose(x, axes)`` under PyTorch's name: ``y.shape[k] == x.shape[axes[k]]``."""
    return x.permute(axes)


def concat(tensors: Any, axis: int = 0) -> Tensor:
    """``np.concatenate``: join tensors of one dtype along ``axis``; the backward splits the gradient back."""
    return join.concat(tensors, axis)


def stack(tensors: Any, axis: int = 0) -> Tensor:
    """``np.stack``: join tensors of one shape along a new axis ``axis``."""
    return join.stack(tensors, axis)


def split(x: Tensor, sizes_or_sections: Any, axis: int = 0) -> tuple[Tensor, ...]:
    """Cut ``x`` along ``axis`` into a tuple of Tensors: a list gives their lengths, an int ``n`` makes ``n`` equal
    pieces (``np.split``'s rule). Each piece has its own gradient, which lands in its slice of ``x.grad``."""
    return join.split(x, sizes_or_sections, axis)


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``for i: y[i] = a[i] if cond[i] else b[i]``: ``cond`` a bool Tensor, ``a`` and ``b`` Tensors or numbers,
    all broadcasting together; the gradient goes to ``a`` where cond holds and to ``b`` elsewhere."""
    return select.where(cond, a, b)


def clip(x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
    """``for i: y[i] = min(max(x[i], lo), hi)`` with number bounds (None: no bound); gradient 1 inside
    ``[lo, hi]`` (bounds included, as PyTorch's clamp), 0 outside."""
    return select.clip(x, lo, hi)


def masked_fill(x: Tensor, mask: Any, value: Any) -> Tensor:
    """``for i: y[i] = value if mask[i] else x[i]``: ``mask`` a bool Tensor that broadcasts to ``x``'s shape;
    no gradient flows to the filled positions."""
    return select.masked_fill(x, mask, value)


def gather(x: Tensor, index: Any, axis: int) -> Tensor:
    return x.gather(index, axis)


def scatter_add(x: Tensor, index: Any, src: Tensor, axis: int) -> Tensor:
    return x.scatter_add(index, src, axis)


def index_select(x: Tensor, axis: int, index: Any) -> Tensor:
    return x.index_select(axis, index)


def embedding(ids: Any, weight: Tensor) -> Tensor:
    """``weight[ids]``: the row of ``weight`` (num_embeddings, dim) for every id; ids may have any shape."""
    ids = ids if isinstance(ids, Tensor) else tensor(np.asarray(ids))
    if ids.dtype.kind not in "iu":
        raise TypeError(f"ids: expected an integer dtype, got {ids.dtype}")
    return indexing.Embedding.apply(ids, weight)


# -- layers and losses ------------------------------------------------------------------------------------------


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each row over the last axis to mean 0 and variance 1, then scale by weight and shift by bias."""
    return nn.LayerNorm.apply(x, weight, bias, eps)


def dropout(x: Tensor, p: float = 0.5, seed: int = 0, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``; identity unless training.

    The same ``seed`` gives the same mask on every backend.
    """
    if not 0 <= p < 1:
        raise ValueError(f"p: expected a probability in [0, 1), got {p}")
    if not training or p == 0:
        return x
    return nn.Dropout.apply(x, p, seed)


def cross_entropy(logits: Tensor, targets: Any) -> Tensor:
    """Mean over the batch of ``-log softmax(logits)[target]``; logits (N, C), targets N integer classes."""
    if logits.ndim != 2:
        raise ValueError(f"logits: expected shape (batch, classes), got {logits.shape}")
    targets = targets if isinstance(targets, Tensor) else tensor(np.asarray(targets))
    if targets.dtype.kind not in "iu" or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"targets: expected {logits.shape[0]} integer class indices (shape {logits.shape[:1]}), "
            f"got dtype {targets.dtype} and shape {targets.shape}"
        )
    picked = logits.log_softmax(axis=-1).gather(targets.reshape(-1, 1), axis=1)
    return -picked.mean()


def mse_loss(pred: Tensor, target: Any) -> Tensor:
    """Mean of ``(pred - target) ** 2`` over every element."""
    diff = pred - target
    return (diff * diff).mean()


__all__ = [
    "abs",
    "add",
    "argmax",
    "clip",
    "concat",
    "cross_entropy",
    "div",
    "dropout",
    "embedding",
    "exp",
    "gather",
    "gelu",
    "index_select",
    "layer_norm",
    "log",
    "log_softmax",
    "masked_fill",
    "matmul",
    "max",
    "mean",
    "min",
    "mse_loss",
    "mul",
    "neg",
    "permute",
    "pow",
    "relu",
    "reshape",
    "scatter_add",
    "sigmoid",
    "softmax",
    "split",
    "sqrt",
    "stack",
    "sub",
    "sum",
    "tanh",
    "transpose",
    "where",
]
