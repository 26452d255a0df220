"""Function forms of the Tensor operations (``F.*``), plus the losses built from them.

Example::

    import nbcoll.functional as F
    logits = x @ w + b
    loss = F.cross_entropy(logits, targets)          # mean over the batch of -log softmax(logits)[target]
    loss.backward()

Every function takes Tensors (Python scalars are accepted where a Tensor method accepts them) and returns a
Tensor that records its graph unless ``no_grad`` is active. Each one is written in the module of its family in
:mod:`nbcoll.tensors.ops`, beside the ``Function`` it applies and the Tensor method (often the very same function:
``F.exp is nbcoll.Tensor.exp``), and is gathered here; only the losses are written in this file.

================================================= ==================================================
family                                            functions
================================================= ==================================================
:mod:`~nbcoll.tensors.ops.arithmetic`             add, sub, mul, div, pow, neg
:mod:`~nbcoll.tensors.ops.elementwise`            exp, log, sqrt, tanh, sigmoid, relu, gelu, abs
:mod:`~nbcoll.tensors.ops.reduce`                 sum, mean, max, min, argmax
:mod:`~nbcoll.tensors.ops.matmul`                 matmul
:mod:`~nbcoll.tensors.ops.softmax`                softmax, log_softmax
:mod:`~nbcoll.tensors.ops.shape`                  reshape, transpose, permute
:mod:`~nbcoll.tensors.ops.join`                   concat, stack, split
:mod:`~nbcoll.tensors.ops.select`                 where, clip, masked_fill
:mod:`~nbcoll.tensors.ops.indexing`               index_select, gather, scatter_add, embedding
:mod:`~nbcoll.tensors.ops.nn`                     layer_norm, dropout
================================================= ==================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.tensors.ops.arithmetic import add, div, mul, neg, pow, sub
from nbcoll.tensors.ops.elementwise import abs, exp, gelu, log, relu, sigmoid, sqrt, tanh
from nbcoll.tensors.ops.indexing import embedding, gather, index_select, scatter_add
from nbcoll.tensors.ops.join import concat, split, stack
from nbcoll.tensors.ops.matmul import matmul
from nbcoll.tensors.ops.nn import dropout, layer_norm
from nbcoll.tensors.ops.reduce import argmax, max, mean, min, sum
from nbcoll.tensors.ops.select import clip, masked_fill, where
from nbcoll.tensors.ops.shape import permute, reshape, transpose
from nbcoll.tensors.ops.softmax import log_softmax, softmax
from nbcoll.tensors.tensor import Tensor, tensor

# -- losses -------------------------------------------------------------------------------------------------------


def cross_entropy(logits: Tensor, targets: Any) -> Tensor:
    """Mean over the batch of ``-log softmax(logits)[target]``; logits (N, C), targets N integer classes.

    >>> import nbcoll, nbcoll.functional as F
    >>> logits = nbcoll.tensor([[0.0, 0.0], [10.0, 0.0]])
    >>> round(F.cross_entropy(logits, [0, 0]).item(), 4)          # (log 2 + ~0) / 2
    0.3466
    """
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
    """Mean of ``(pred - target) ** 2`` over every element.

    >>> import nbcoll, nbcoll.functional as F
    >>> F.mse_loss(nbcoll.tensor([1.0, 3.0]), nbcoll.tensor([1.0, 1.0])).item()
    2.0
    """
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
