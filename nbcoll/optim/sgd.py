"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay (PyTorch's rule).

The update of one parameter is one launch of :func:`nbcoll.kernels.optim.sgd_step`::

    d = grad + weight_decay * p
    buf = d                                       on the first step
    buf = momentum * buf + (1 - dampening) * d    afterwards
    d = d + momentum * buf  (nesterov)   or   d = buf
    p = p - lr * d
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import optim as optim_kernels
from nbcoll.optim.optimizer import Optimizer, ParamsArg
from nbcoll.tensors import Tensor
from nbcoll.tensors.arrays import full


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum and weight decay.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> w = nn.Parameter(nbcoll.tensor([1.0]))
        >>> optimizer = nbcoll.optim.SGD([w], lr=0.1, momentum=0.9, nesterov=True)
        >>> for step in range(2):
        ...     optimizer.zero_grad()
        ...     (w * 1.0).sum().backward()          # gradient 1 each step
        ...     optimizer.step()
        >>> round(w.item(), 4)
        0.539

    The defaults are PyTorch's: ``lr=1e-3``, no momentum, no dampening, no weight decay. The momentum buffer of
    a parameter is ``state[param]["momentum_buffer"]``, created on its first step.
    """

    def __init__(
        self,
        params: ParamsArg,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
        }
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if not group["momentum"] >= 0:
            raise ValueError(f"momentum: must be >= 0, got {group['momentum']}")
        if not group["weight_decay"] >= 0:
            raise ValueError(f"weight_decay: must be >= 0, got {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("nesterov: needs momentum > 0 and dampening == 0")

    def _update(self, param: Tensor, grad: Any, group: dict[str, Any], state: dict[str, Any]) -> None:
        buf = state.get("momentum_buffer")
        first = buf is None
        if first and group["momentum"] != 0:
            buf = state["momentum_buffer"] = full(param.shape, 0, param.dtype)
        optim_kernels.sgd_step(
            param.data,
            grad,
            buf,
            lr=group["lr"],
            momentum=group["momentum"],
            dampening=group["dampening"],
            weight_decay=group["weight_decay"],
            nesterov=group["nesterov"],
            first=first,
        )
