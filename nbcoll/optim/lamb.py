"""LAMB (You et al. 2019): Adam's direction, scaled per layer by the ratio of the weight's norm to the step's.

At step ``t`` (from 1), for each parameter::

    m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
    r = (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + eps) + weight_decay * w
    trust = phi(||w||) / ||r||          phi the identity; 1 where ||w|| or ||r|| is 0, or adaptation is off
    w = w - lr * trust * r

So every layer moves by ``lr`` times its own norm, whatever the scale of its gradient: what lets BERT train with
batches of 32k. The direction is one launch of :func:`nbcoll.kernels.optim.lamb_direction`, the norms two
reductions, the step one launch of :func:`nbcoll.kernels.optim.lamb_apply`.
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.kernels import layerwise_optim as optim_kernels
from nbcoll.optim.optimizer import Optimizer, ParamsArg
from nbcoll.tensors import Tensor
from nbcoll.tensors.arrays import full


class LAMB(Optimizer):
    """Layer-wise adaptive moments: Adam's bias-corrected direction with a per-parameter trust ratio.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> w = nn.Parameter(nbcoll.tensor([3.0, 4.0]))
        >>> optimizer = optim.LAMB([w], lr=0.1)
        >>> (w * nbcoll.tensor([1.0, -1.0])).sum().backward()
        >>> optimizer.step()                     # r = sign(g) = [1, -1]; the step is lr * ||w|| = 0.5 long
        >>> w.numpy().round(4), round(optimizer.state[w]["trust_ratio"], 4)
        (array([2.6464, 4.3536], dtype=float32), 3.5355)

    Defaults: ``lr=1e-3, betas=(0.9, 0.999), eps=1e-6``, no weight decay, ``adaptation=True`` (a group with
    ``adaptation=False`` takes Adam's step with ``trust = 1``). ``state[param]`` holds ``step``, ``exp_avg``,
    ``exp_avg_sq`` and the last ``trust_ratio``.
    """

    def __init__(
        self,
        params: ParamsArg,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adaptation: bool = True,
    ) -> None:
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "adaptation": adaptation}
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        betas = group["betas"]
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas: expected two numbers in [0, 1), got {betas}")
        group["betas"] = tuple(betas)
        for name in ("eps", "weight_decay"):
            if not group[name] >= 0:
                raise ValueError(f"{name}: must be >= 0, got {group[name]}")
        if not isinstance(group["adaptation"], bool):
            raise TypeError(f"adaptation: expected True or False, got {group['adaptation']!r}")

    def _update(self, param: Tensor, grad: Any, group: dict[str, Any], state: dict[str, Any]) -> None:
        if not state:
            state["step"] = 0
            state["exp_avg"] = full(param.shape, 0, param.dtype)
            state["exp_avg_sq"] = full(param.shape, 0, param.dtype)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        update = memory.empty(param.shape, param.dtype)
        optim_kernels.lamb_direction(
            param.data,
            grad,
            state["exp_avg"],
            state["exp_avg_sq"],
            update,
            step=state["step"],
            beta1=beta1,
            beta2=beta2,
            eps=group["eps"],
            weight_decay=group["weight_decay"],
        )
        trust = 1.0
        if group["adaptation"]:
            w_norm, r_norm = optim_kernels.l2_norm(param.data), optim_kernels.l2_norm(update)
            trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
        state["trust_ratio"] = trust
        optim_kernels.lamb_apply(param.data, update, group["lr"] * trust)


__all__ = ["LAMB"]
