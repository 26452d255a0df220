"""The layer-wise optimizers' update rules (LARS, LAMB): one fused kernel per parameter, one thread per element.

Both scale a layer's step by a *trust ratio* of two norms, ``||p|| / ||update||``, which only the whole layer
knows: the host computes the norms with the existing reductions (:func:`l2_norm`) and hands the ratio to the
kernels, which are elementwise like :mod:`nbcoll.kernels.optim`'s::

    lars_step(p, g, buf, scaled_lr, momentum, weight_decay):     # scaled_lr = lr * trust ratio, from the norms
        for i:
            buf[i] = momentum * buf[i] + scaled_lr * (g[i] + weight_decay * p[i])
            p[i] = p[i] - buf[i]

    lamb_direction(p, g, m, v, r, step, beta1, beta2, eps, weight_decay):      # LAMB's first half
        for i:
            m[i] = beta1 * m[i] + (1 - beta1) * g[i]
            v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i]
            r[i] = (m[i] / bias_correction1) / (sqrt(v[i] / bias_correction2) + eps) + weight_decay * p[i]
    lamb_apply(p, r, step_size):                                 # step_size = lr * ||p|| / ||r||, from the norms
        for i:
            p[i] = p[i] - step_size * r[i]

The arithmetic runs in the parameter's dtype, the hyper-parameters converted on the host, as in
:mod:`nbcoll.kernels.optim`.

Example::

    from nbcoll.kernels import layerwise_optim
    layerwise_optim.lars_step(param, grad, momentum_buffer, lr=0.1, trust_ratio=0.02, momentum=0.9,
                              weight_decay=1e-4)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels import elementwise, reduction
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view, launch_1d
from nbcoll.kernels.optim import _like_param, _param
from nbcoll.kernels.registry import register

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def lars_reference(
    param: np.ndarray, grad: np.ndarray, buf: np.ndarray, scaled_lr: Any, momentum: Any, weight_decay: Any
) -> None:
    """:func:`lars_step` on NumPy arrays; scalars already in the parameter's dtype."""
    buf[...] = momentum * buf + scaled_lr * (grad + weight_decay * param)
    param[...] = param - buf


def lamb_direction_reference(
    param: np.ndarray,
    grad: np.ndarray,
    exp_avg: np.ndarray,
    exp_avg_sq: np.ndarray,
    update: np.ndarray,
    beta1: Any,
    one_minus_beta1: Any,
    beta2: Any,
    one_minus_beta2: Any,
    eps: Any,
    weight_decay: Any,
    bias_correction1: Any,
    bias_correction2: Any,
) -> None:
    """:func:`lamb_direction` on NumPy arrays; scalars already in the parameter's dtype."""
    exp_avg[...] = beta1 * exp_avg + one_minus_beta1 * grad
    exp_avg_sq[...] = beta2 * exp_avg_sq + one_minus_beta2 * grad * grad
    update[...] = (exp_avg / bias_correction1) / (np.sqrt(exp_avg_sq / bias_correction2) + eps) + weight_decay * param


def lamb_apply_reference(param: np.ndarray, update: np.ndarray, step_size: Any) -> None:
    """:func:`lamb_apply` on NumPy arrays."""
    param[...] = param - step_size * update


# ---------------------------------------------------------------------------------------------------------------
# Kernels.

_LARS_SIGNATURES = tuple(f"void({t}[::1], {t}[::1], {t}[::1], {t}, {t}, {t})" for t in ("float32", "float64"))
_LAMB_SIGNATURES = tuple(
    f"void({t}[::1], {t}[::1], {t}[::1], {t}[::1], {t}[::1], {t}, {t}, {t}, {t}, {t}, {t}, {t}, {t})"
    for t in ("float32", "float64")
)
_LAMB_APPLY_SIGNATURES = tuple(f"void({t}[::1], {t}[::1], {t})" for t in ("float32", "float64"))


@register(*_LARS_SIGNATURES)
@cuda.jit
def lars_kernel(param, grad, buf, scaled_lr, momentum, weight_decay):
    # One thread updates one element of the parameter and of its momentum buffer.
    i = cuda.grid(1)
    if i < param.size:
        p = param[i]
        b = momentum * buf[i] + scaled_lr * (grad[i] + weight_decay * p)
        buf[i] = b
        param[i] = p - b


@register(*_LAMB_SIGNATURES)
@cuda.jit
def lamb_direction_kernel(
    param,
    grad,
    exp_avg,
    exp_avg_sq,
    update,
    beta1,
    one_minus_beta1,
    beta2,
    one_minus_beta2,
    eps,
    weight_decay,
    bias_correction1,
    bias_correction2,
):
    # One thread updates one element of the two moment estimates and writes that element of the direction.
    i = cuda.grid(1)
    if i < param.size:
        g = grad[i]
        m = beta1 * exp_avg[i] + one_minus_beta1 * g
        v = beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g
        exp_avg[i] = m
        exp_avg_sq[i] = v
        update[i] = (m / bias_correction1) / (math.sqrt(v / bias_correction2) + eps) + weight_decay * param[i]


@register(*_LAMB_APPLY_SIGNATURES)
@cuda.jit
def lamb_apply_kernel(param, update, step_size):
    # One thread moves one element of the parameter along the direction.
    i = cuda.grid(1)
    if i < param.size:
        param[i] = param[i] - step_size * update[i]


# ---------------------------------------------------------------------------------------------------------------
# Launch.


def l2_norm(x: Any) -> float:
    """``sqrt(sum_i x[i] ** 2)`` as a Python float (0.0 for an empty array): the existing reductions, on the host.

    >>> import numpy as np
    >>> from nbcoll.kernels import layerwise_optim
    >>> layerwise_optim.l2_norm(np.array([3.0, 4.0]))
    5.0
    """
    x = flat_view(memory.as_device_array(x, "x"))
    return math.sqrt(float(reduction.reduce_all("sum", elementwise.binary("mul", x, x)))) if x.size else 0.0


def lars_step(
    param: Any, grad: Any, momentum_buffer: Any, lr: float, trust_ratio: float, momentum: float, weight_decay: float
) -> None:
    """One LARS step on ``param`` in place with the layer's ``trust_ratio`` (computed by the caller from norms)."""
    param = _param(param)
    grad = _like_param(grad, "grad", param)
    buf = _like_param(momentum_buffer, "momentum_buffer", param)
    t = param.dtype.type
    _lars_step(param, grad, buf, t(lr * trust_ratio), t(momentum), t(weight_decay))


@dispatch(reference=lars_reference)
def _lars_step(param: Any, grad: Any, buf: Any, *scalars: Any) -> None:
    launch_1d(lars_kernel, param.size, flat_view(param), flat_view(grad), flat_view(buf), *scalars)


def lamb_direction(
    param: Any,
    grad: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    update: Any,
    step: int,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-6,
    weight_decay: float = 0.0,
) -> None:
    """LAMB's first half: advance the moments in place and write the direction ``r`` into ``update``."""
    param = _param(param)
    arrays = [_like_param(a, name, param) for a, name in ((grad, "grad"), (exp_avg, "exp_avg"))]
    arrays += [_like_param(a, name, param) for a, name in ((exp_avg_sq, "exp_avg_sq"), (update, "update"))]
    if step < 1:
        raise ValueError(f"step: counts from 1, got {step}")
    t = param.dtype.type
    scalars = (t(beta1), t(1 - beta1), t(beta2), t(1 - beta2), t(eps), t(weight_decay))
    _lamb_direction(param, *arrays, *scalars, t(1 - beta1**step), t(1 - beta2**step))


@dispatch(reference=lamb_direction_reference)
def _lamb_direction(param: Any, *arrays_and_scalars: Any) -> None:
    arrays, scalars = arrays_and_scalars[:4], arrays_and_scalars[4:]
    launch_1d(lamb_direction_kernel, param.size, flat_view(param), *(flat_view(a) for a in arrays), *scalars)


def lamb_apply(param: Any, update: Any, step_size: float) -> None:
    """LAMB's second half: ``param -= step_size * update`` in place (``step_size = lr * trust ratio``)."""
    param = _param(param)
    update = _like_param(update, "update", param)
    _lamb_apply(param, update, param.dtype.type(step_size))


@dispatch(reference=lamb_apply_reference)
def _lamb_apply(param: Any, update: Any, step_size: Any) -> None:
    launch_1d(lamb_apply_kernel, param.size, flat_view(param), flat_view(update), step_size)
