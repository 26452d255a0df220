"""Check analytical gradients against central finite differences, in float64.

For a random weighting ``v`` of the outputs, backward gives ``g = J^T v`` (J the Jacobian of ``fn``); each entry
is compared with the slope of ``sum(v * fn(...))`` measured by moving one input element by ``+-eps``::

    numerical[k] = (sum(v * fn(x + eps e_k)) - sum(v * fn(x - eps e_k))) / (2 eps)

A wrong entry of J changes ``g`` for almost every ``v``, so one backward checks the whole Jacobian while the cost
stays at two forward evaluations per input element.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.autograd import gradcheck
    >>> x = nbcoll.tensor(np.random.default_rng(0).random((3, 4)), dtype=np.float64, requires_grad=True)
    >>> gradcheck(lambda x: (x.exp() * x).sum(axis=1), [x])      # True, or AssertionError with the worst entry
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nbcoll.tensors import Tensor, no_grad, tensor


def _float64_leaves(inputs: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """Float64 copies of the inputs to differentiate (those that require grad, else every floating Tensor)."""
    tensors = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.dtype.kind == "f"]
    chosen = [i for i in tensors if inputs[i].requires_grad] or tensors
    if not chosen:
        raise ValueError("inputs: gradcheck needs at least one floating-point Tensor to differentiate")
    leaves = list(inputs)
    for i in chosen:
        leaves[i] = tensor(inputs[i].numpy().astype(np.float64), requires_grad=True)
    return leaves, chosen


def _weighted_output(fn: Callable[..., Tensor], args: Sequence[Any], weights: np.ndarray) -> float:
    with no_grad():
        return float(np.sum(weights * fn(*args).numpy()))


def gradcheck(
    fn: Callable[..., Tensor],
    inputs: Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    seed: int = 0,
) -> bool:
    """True when backward through ``fn(*inputs)`` matches central differences; else ``AssertionError``.

    Inputs that are not Tensors, or are integer Tensors (indices), are passed to ``fn`` unchanged. An entry
    passes when ``|analytical - numerical| <= atol + rtol * |numerical|``; the error names the worst one.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.autograd import gradcheck
    >>> x = nbcoll.tensor([0.5, -1.0, 2.0], dtype=np.float64, requires_grad=True)
    >>> gradcheck(lambda x: (x * x.tanh()).sum(), [x])
    True
    """
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    leaves, chosen = _float64_leaves(inputs)
    output = fn(*leaves)
    if not isinstance(output, Tensor) or output.dtype != np.float64:
        raise TypeError(f"fn: must return a float64 Tensor for float64 inputs, got {output!r}")
    weights = np.random.default_rng(seed).standard_normal(output.shape)
    if not output.requires_grad:
        raise AssertionError("gradcheck: the output does not depend on any input that requires grad")
    output.backward(tensor(weights, dtype=np.float64))

    worst = None  # (excess over tolerance, message)
    for i in chosen:
        leaf = leaves[i]
        analytical = np.zeros(leaf.shape) if leaf.grad is None else leaf.grad.numpy()
        values = leaf.numpy()
        numerical = np.zeros(leaf.shape)
        for position in np.ndindex(leaf.shape):
            slopes = []
            for step in (eps, -eps):
                moved = values.copy()
                moved[position] += step
                args = list(leaves)
                args[i] = tensor(moved, dtype=np.float64)
                slopes.append(_weighted_output(fn, args, weights))
            numerical[position] = (slopes[0] - slopes[1]) / (2 * eps)
        error = np.abs(analytical - numerical)
        excess = error - (atol + rtol * np.abs(numerical))
        if excess.size and excess.max() > 0:
            at = np.unravel_index(int(np.argmax(excess)), excess.shape)
            message = (
                f"gradcheck: input {i} (shape {leaf.shape}) at index {tuple(int(a) for a in at)}: "
                f"analytical {analytical[at]:.6g}, numerical {numerical[at]:.6g}, "
                f"|difference| {error[at]:.3g} > atol + rtol * |numerical| = {atol + rtol * abs(numerical[at]):.3g} "
                f"({int((excess > 0).sum())} of {excess.size} entries fail)"
            )
            if worst is None or excess.max() > worst[0]:
                worst = (float(excess.max()), message)
    if worst is not None:
        raise AssertionError(worst[1])
    return True
