"""Gradient clipping by the global norm: ``clip_grad_norm_`` rescales all gradients together.

::

    total = (sum over parameters p, elements i of |p.grad[i]| ** 2) ** 0.5       (norm_type=2)
    total = max over parameters p, elements i of |p.grad[i]|                      (norm_type=inf)
    if total > max_norm: every p.grad *= max_norm / (total + 1e-6)

Each parameter's partial norm is one elementwise kernel and one tree reduction (``nbcoll.kernels``); the scaling
is one kernel per gradient.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from nbcoll.kernels import combine, elementwise, reduction
from nbcoll.tensors import Tensor


def clip_grad_norm_(
    parameters: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
) -> float:
    """Scale the gradients in place so that their global norm is at most ``max_norm``; returns the norm before.

    Example::

        >>> import nbcoll
        >>> w = nbcoll.tensor([0.0, 0.0], requires_grad=True)
        >>> (w * nbcoll.tensor([3.0, 4.0])).sum().backward()          # w.grad = [3, 4], norm 5
        >>> nbcoll.optim.clip_grad_norm_([w], max_norm=1.0)           # returns the norm before clipping
        5.0
        >>> w.grad.numpy().round(4)
        array([0.6, 0.8], dtype=float32)

    Parameters without a gradient are skipped. ``norm_type`` is 2 or ``math.inf``. A NaN or infinite norm is
    returned as it is (gradients untouched), or raised with ``error_if_nonfinite=True``.
    """
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    if not max_norm >= 0:
        raise ValueError(f"max_norm: must be >= 0, got {max_norm}")
    if norm_type not in (2, 2.0, math.inf):
        raise ValueError(f"norm_type: expected 2 or math.inf, got {norm_type}")
    grads = [p.grad.data for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if norm_type == math.inf:
        partials = [float(reduction.reduce_all("max", elementwise.unary("abs", g))) for g in grads if g.size]
        total = max(partials, default=0.0)
    else:
        total = math.sqrt(sum(float(reduction.reduce_all("sum", elementwise.binary("mul", g, g))) for g in grads))
    if not math.isfinite(total):
        if error_if_nonfinite:
            raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is {total}; not clipping")
        return total
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in grads:
            combine.scale(g, coef)
    return total
