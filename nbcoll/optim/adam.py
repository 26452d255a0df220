"""Adam and AdamW: adaptive moment estimation, with L2 weight decay (Adam) or decoupled weight decay (AdamW).

The update of one parameter at step ``t`` (from 1) is one launch of :func:`nbcoll.kernels.optim.adam_step`::

    p = p * (1 - lr * weight_decay)                         AdamW only
    d = grad + weight_decay * p                             Adam only (AdamW: d = grad)
    m = beta1 * m + (1 - beta1) * d
    v = beta2 * v + (1 - beta2) * d * d
    p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import optim as optim_kernels
from nbcoll.optim.optimizer import Optimizer, ParamsArg
from nbcoll.tensors import Tensor
from nbcoll.tensors.arrays import full


class Adam(Optimizer):
    """Adam, with PyTorch's defaults: ``lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0``.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> model = nn.Linear(2, 1)
        >>> optimizer = nbcoll.optim.Adam(model.parameters(), lr=1e-3)
        >>> before = model.weight.numpy()
        >>> optimizer.zero_grad()
        >>> model(nbcoll.tensor([[1.0, -1.0]])).sum().backward()
        >>> optimizer.step()
        >>> (model.weight.numpy() - before).round(6)        # Adam's first step: lr * sign(grad)
        array([[-0.001,  0.001]], dtype=float32)
        >>> sorted(optimizer.state[model.weight])
        ['exp_avg', 'exp_avg_sq', 'step']

    ``state[param]`` holds ``step`` (an int), ``exp_avg`` and ``exp_avg_sq`` (the two moment estimates).
    PyTorch's ``amsgrad`` and ``maximize`` variants are not offered, and its ``foreach``/``fused`` switches have
    no counterpart: the one fused kernel per parameter is the only implementation.
    """

    decoupled = False

    def __init__(
        self,
        params: ParamsArg,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        betas = group["betas"]
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas: expected two numbers in [0, 1), got {betas}")
        group["betas"] = tuple(betas)
        if not group["eps"] >= 0:
            raise ValueError(f"eps: must be >= 0, got {group['eps']}")
        if not group["weight_decay"] >= 0:
            raise ValueError(f"weight_decay: must be >= 0, got {group['weight_decay']}")

    def _update(self, param: Tensor, grad: Any, group: dict[str, Any], state: dict[str, Any]) -> None:
        if not state:
            state["step"] = 0
            state["exp_avg"] = full(param.shape, 0, param.dtype)
            state["exp_avg_sq"] = full(param.shape, 0, param.dtype)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        optim_kernels.adam_step(
            param.data,
            grad,
            state["exp_avg"],
            state["exp_avg_sq"],
            lr=group["lr"],
            step=state["step"],
            beta1=beta1,
            beta2=beta2,
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            decoupled=self.decoupled,
        )


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter), PyTorch's defaults (``weight_decay=1e-2``).

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> model = nn.Linear(2, 1)
        >>> optimizer = nbcoll.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        >>> model(nbcoll.tensor([[1.0, -1.0]])).sum().backward()
        >>> optimizer.step()
        >>> optimizer.param_groups[0]["weight_decay"]
        0.01

    The decay shrinks the parameter directly, ``p *= 1 - lr * weight_decay``, instead of entering the gradient
    where the moment estimates would rescale it.
    """

    decoupled = True

    def __init__(
        self,
        params: ParamsArg,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
