"""The optimizers' update rules, each one fused kernel per parameter: one thread updates one element.

A chain of elementwise launches (``buf *= momentum``, ``buf += g``, ``p -= lr * buf``, ...) would read and write
every array several times; a fused kernel reads each element once, does the whole rule in registers, and writes
each result once. The rules are PyTorch's (``torch.optim``, ``foreach=False``)::

    sgd_step(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first):
        for i:
            d = g[i] + weight_decay * p[i]
            if momentum != 0:
                buf[i] = d if first else momentum * buf[i] + (1 - dampening) * d
                d = d + momentum * buf[i] if nesterov else buf[i]
            p[i] = p[i] - lr * d

    adam_step(p, g, m, v, lr, step, beta1, beta2, eps, weight_decay, decoupled):
        for i:                                    # bias_correction_k = 1 - beta_k ** step, computed on the host
            if decoupled: p[i] = p[i] * (1 - lr * weight_decay)       # AdamW
            d = g[i] if decoupled else g[i] + weight_decay * p[i]     # Adam: L2 penalty folded into the gradient
            m[i] = beta1 * m[i] + (1 - beta1) * d
            v[i] = beta2 * v[i] + (1 - beta2) * d * d
            p[i] = p[i] - (lr / bias_correction1) * m[i] / (sqrt(v[i]) / sqrt(bias_correction2) + eps)

The arithmetic runs in the parameter's dtype (float32 or float64): the hyper-parameters are converted to it on the
host, as PyTorch's fused kernels do, so the NumPy references and the kernels do the same operations in the same
order.

Example::

    from nbcoll.kernels import optim
    optim.sgd_step(param, grad, momentum_buffer, lr=0.1, momentum=0.9, first=True)
    optim.adam_step(param, grad, exp_avg, exp_avg_sq, lr=1e-3, step=1)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view, launch_1d
from nbcoll.kernels.registry import register

OPTIMIZER_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""The parameter dtypes the update rules run in."""

# ---------------------------------------------------------------------------------------------------------------
# NumPy references: the same rules, one whole-array statement per line, updating the arrays in place.
#
# Every constant derived from the hyper-parameters (``1 - dampening``, ``lr / bias_correction1``, ...) is computed
# once on the host, in double precision as PyTorch does, and passed in the parameter's dtype: inside a kernel an
# integer literal such as the ``1`` of ``1 - beta1`` would widen float32 arithmetic to float64.


def sgd_reference(
    param: np.ndarray,
    grad: np.ndarray,
    buf: np.ndarray,
    lr: Any,
    momentum: Any,
    one_minus_dampening: Any,
    weight_decay: Any,
    nesterov: int,
    first: int,
) -> None:
    """:func:`sgd_step` on NumPy arrays; scalars already in the parameter's dtype."""
    d = grad + weight_decay * param
    if momentum != 0:
        buf[...] = d if first else momentum * buf + one_minus_dampening * d
        d = d + momentum * buf if nesterov else buf
    param[...] = param - lr * d


def adam_reference(
    param: np.ndarray,
    grad: np.ndarray,
    exp_avg: np.ndarray,
    exp_avg_sq: np.ndarray,
    beta1: Any,
    one_minus_beta1: Any,
    beta2: Any,
    one_minus_beta2: Any,
    eps: Any,
    weight_decay: Any,
    decay_factor: Any,
    step_size: Any,
    bias_correction2_sqrt: Any,
) -> None:
    """:func:`adam_step` on NumPy arrays; scalars already in the parameter's dtype.

    ``weight_decay`` is the L2 term added to the gradient (Adam); ``decay_factor = 1 - lr * weight_decay`` the
    decoupled shrinking of the parameter (AdamW). Each caller sets the other one to 0 or 1.
    """
    param[...] = param * decay_factor
    d = grad + weight_decay * param
    exp_avg[...] = beta1 * exp_avg + one_minus_beta1 * d
    exp_avg_sq[...] = beta2 * exp_avg_sq + one_minus_beta2 * d * d
    param[...] = param - step_size * exp_avg / (np.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)


# ---------------------------------------------------------------------------------------------------------------
# Kernels.

_SGD_SIGNATURES = tuple(
    f"void({t}[::1], {t}[::1], {t}[::1], {t}, {t}, {t}, {t}, int32, int32)" for t in ("float32", "float64")
)
_ADAM_SIGNATURES = tuple(
    f"void({t}[::1], {t}[::1], {t}[::1], {t}[::1], {t}, {t}, {t}, {t}, {t}, {t}, {t}, {t}, {t})"
    for t in ("float32", "float64")
)


@register(*_SGD_SIGNATURES)
@cuda.jit
def sgd_kernel(param, grad, buf, lr, momentum, one_minus_dampening, weight_decay, nesterov, first):
    # One thread updates one element of the parameter and of its momentum buffer (unused when momentum == 0).
    i = cuda.grid(1)
    if i < param.size:
        p = param[i]
        d = grad[i] + weight_decay * p
        if momentum != 0:
            if first:
                b = d
            else:
                b = momentum * buf[i] + one_minus_dampening * d
            buf[i] = b
            if nesterov:
                d = d + momentum * b
            else:
                d = b
        param[i] = p - lr * d


@register(*_ADAM_SIGNATURES)
@cuda.jit
def adam_kernel(
    param,
    grad,
    exp_avg,
    exp_avg_sq,
    beta1,
    one_minus_beta1,
    beta2,
    one_minus_beta2,
    eps,
    weight_decay,
    decay_factor,
    step_size,
    bias_correction2_sqrt,
):
    # One thread updates one element of the parameter and of its two moment estimates.
    i = cuda.grid(1)
    if i < param.size:
        p = param[i] * decay_factor
        d = grad[i] + weight_decay * p
        m = beta1 * exp_avg[i] + one_minus_beta1 * d
        v = beta2 * exp_avg_sq[i] + one_minus_beta2 * d * d
        exp_avg[i] = m
        exp_avg_sq[i] = v
        param[i] = p - step_size * m / (math.sqrt(v) / bias_correction2_sqrt + eps)


# ---------------------------------------------------------------------------------------------------------------
# Launch functions: check the arrays once, convert the scalars to the parameter's dtype, then run the kernel or,
# on the numpy backend, the reference.


def _param(param: Any) -> Any:
    param = memory.as_device_array(param, "param")
    if np.dtype(param.dtype) not in OPTIMIZER_DTYPES:
        raise TypeError(f"param.dtype: the optimizers update float32 or float64 parameters, got {param.dtype}")
    memory.require_contiguous(param, "param")
    return param


def _like_param(x: Any, arg: str, param: Any) -> Any:
    x = memory.as_device_array(x, arg)
    if x.dtype != param.dtype or tuple(x.shape) != tuple(param.shape):
        raise ValueError(
            f"{arg}: expected shape {tuple(param.shape)} and dtype {param.dtype} (the parameter's), "
            f"got {tuple(x.shape)} and {x.dtype}"
        )
    memory.require_contiguous(x, arg)
    return x


def sgd_step(
    param: Any,
    grad: Any,
    momentum_buffer: Any | None,
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    first: bool = False,
) -> None:
    """One SGD step on ``param`` in place (the rule in the module docstring); ``first`` starts the momentum buffer.

    ``momentum_buffer`` is updated in place; it may be None only when ``momentum == 0``.
    """
    param = _param(param)
    grad = _like_param(grad, "grad", param)
    if momentum != 0:
        if momentum_buffer is None:
            raise ValueError("momentum_buffer: needed when momentum != 0")
        buf = _like_param(momentum_buffer, "momentum_buffer", param)
    else:
        buf = param  # never read or written: the kernel skips the buffer when momentum == 0
    t = param.dtype.type
    scalars = (t(lr), t(momentum), t(1 - dampening), t(weight_decay), np.int32(bool(nesterov)), np.int32(bool(first)))
    _sgd_step(param, grad, buf, *scalars)


@dispatch(reference=sgd_reference)
def _sgd_step(param: Any, grad: Any, buf: Any, *scalars: Any) -> None:
    launch_1d(sgd_kernel, param.size, flat_view(param), flat_view(grad), flat_view(buf), *scalars)


def adam_step(
    param: Any,
    grad: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    lr: float,
    step: int,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
) -> None:
    """One Adam (``decoupled=False``) or AdamW (``decoupled=True``) step on ``param`` in place.

    ``step`` counts from 1 and sets the bias corrections ``1 - beta ** step``; the moments are updated in place.
    """
    param = _param(param)
    grad = _like_param(grad, "grad", param)
    exp_avg = _like_param(exp_avg, "exp_avg", param)
    exp_avg_sq = _like_param(exp_avg_sq, "exp_avg_sq", param)
    if step < 1:
        raise ValueError(f"step: counts from 1, got {step}")
    t = param.dtype.type
    scalars = (
        t(beta1),
        t(1 - beta1),
        t(beta2),
        t(1 - beta2),
        t(eps),
        t(0 if decoupled else weight_decay),
        t(1 - lr * weight_decay if decoupled else 1),
        t(lr / (1 - beta1**step)),
        t(math.sqrt(1 - beta2**step)),
    )
    _adam_step(param, grad, exp_avg, exp_avg_sq, *scalars)


@dispatch(reference=adam_reference)
def _adam_step(param: Any, grad: Any, exp_avg: Any, exp_avg_sq: Any, *scalars: Any) -> None:
    moments = flat_view(exp_avg), flat_view(exp_avg_sq)
    launch_1d(adam_kernel, param.size, flat_view(param), flat_view(grad), *moments, *scalars)
