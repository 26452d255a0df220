"""LARS (You, Gitman and Ginsburg 2017): SGD with momentum whose step is scaled per layer by a trust ratio.

Large batches want large learning rates, but one global rate is too large for the layers whose gradients are big
compared with their weights. LARS gives each parameter (a layer's weight) its own rate::

    trust = eta * ||w|| / (||g|| + weight_decay * ||w||)      1 where ||w|| or ||g|| is 0, or adaptation is off
    buf = momentum * buf + lr * trust * (g + weight_decay * w)
    w = w - buf

The norms are two reductions; the update is one launch of :func:`nbcoll.kernels.optim.lars_step`. Biases and the
weights of normalisation layers are usually excluded, from the trust ratio and from weight decay, with a
parameter group of their own::

    LARS([{"params": weights}, {"params": biases_and_norms, "weight_decay": 0.0, "adaptation": False}], lr=1.0)
"""

from __future__ import annotations

from typing import Any

from nbcoll.kernels import layerwise_optim as optim_kernels
from nbcoll.optim.optimizer import Optimizer, ParamsArg
from nbcoll.tensors import Tensor
from nbcoll.tensors.arrays import full


def trust_ratio(eta: float, w_norm: float, g_norm: float, weight_decay: float) -> float:
    """``eta * ||w|| / (||g|| + weight_decay * ||w||)``, or 1 where either norm is 0 (nothing to compare).

    >>> from nbcoll.optim.lars import trust_ratio
    >>> trust_ratio(0.001, 10.0, 0.5, 0.0), trust_ratio(0.001, 0.0, 0.5, 0.0)
    (0.02, 1.0)
    """
    if w_norm == 0 or g_norm == 0:
        return 1.0
    return eta * w_norm / (g_norm + weight_decay * w_norm)


class LARS(Optimizer):
    """Layer-wise adaptive rate scaling: momentum SGD with a per-parameter trust ratio (the module docstring).

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> model = nn.Linear(4, 2)
        >>> optimizer = optim.LARS(
        ...     [{"params": [model.weight]}, {"params": [model.bias], "weight_decay": 0.0, "adaptation": False}],
        ...     lr=0.1, momentum=0.9, weight_decay=1e-4, eta=0.001)
        >>> model(nbcoll.tensor([[1.0] * 4] * 3)).sum().backward()
        >>> optimizer.step()
        >>> sorted(optimizer.state[model.weight])
        ['momentum_buffer', 'trust_ratio']

    ``state[param]["trust_ratio"]`` is the ratio of the last step. Defaults: ``momentum=0.9``, ``eta=0.001`` (the
    paper's trust coefficient), no weight decay, ``adaptation=True``.
    """

    def __init__(
        self,
        params: ParamsArg,
        lr: float = 1.0,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = 0.001,
        adaptation: bool = True,
    ) -> None:
        defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "eta": eta, "adaptation": adaptation}
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        for name in ("momentum", "weight_decay", "eta"):
            if not group[name] >= 0:
                raise ValueError(f"{name}: must be >= 0, got {group[name]}")
        if not isinstance(group["adaptation"], bool):
            raise TypeError(f"adaptation: expected True or False, got {group['adaptation']!r}")

    def _update(self, param: Tensor, grad: Any, group: dict[str, Any], state: dict[str, Any]) -> None:
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = full(param.shape, 0, param.dtype)
        trust = 1.0
        if group["adaptation"]:
            w_norm, g_norm = optim_kernels.l2_norm(param.data), optim_kernels.l2_norm(grad)
            trust = trust_ratio(group["eta"], w_norm, g_norm, group["weight_decay"])
        state["trust_ratio"] = trust
        optim_kernels.lars_step(
            param.data,
            grad,
            state["momentum_buffer"],
            lr=group["lr"],
            trust_ratio=trust,
            momentum=group["momentum"],
            weight_decay=group["weight_decay"],
        )


__all__ = ["LARS", "trust_ratio"]
