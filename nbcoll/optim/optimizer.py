"""The base class of every optimizer: parameter groups, per-parameter state, ``zero_grad`` and ``state_dict``.

Example::

    class PlainSGD(Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, {"lr": lr})

        def _update(self, param, grad, group, state):
            ...  # one fused kernel launch that updates param.data in place

A parameter group is a dict with a ``"params"`` list and its own hyper-parameters (``"lr"``, ...); anything a
group leaves out comes from the optimizer's defaults, so one model can train its embeddings and its other layers
at different rates::

    SGD([{"params": model.embedding.parameters(), "lr": 0.1}, {"params": model.head.parameters()}], lr=0.01)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.tensors import Tensor
from nbcoll.tensors.arrays import from_host, full

ParamsArg = Iterable[Tensor] | Iterable[dict[str, Any]]


class Optimizer:
    """Holds the parameters to update, in groups with their hyper-parameters, and each parameter's state.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> model = nn.Linear(1, 1, bias=False)
        >>> _ = nn.init.ones_(model.weight)
        >>> optimizer = nbcoll.optim.SGD(model.parameters(), lr=0.1)
        >>> for step in range(3):
        ...     optimizer.zero_grad()
        ...     ((model(nbcoll.tensor([[1.0]])) - 2.0) ** 2).sum().backward()
        ...     optimizer.step()
        >>> round(model.weight.item(), 4)             # moving from 1 towards 2
        1.488

    Subclasses implement :meth:`_update` for one parameter; :meth:`step` calls it for every parameter that has a
    gradient. ``state[param]`` is a dict of device arrays and numbers (momentum buffers, step counts).
    """

    def __init__(self, params: ParamsArg, defaults: dict[str, Any]) -> None:
        if isinstance(params, Tensor):
            raise TypeError("params: expected an iterable of Tensors or of parameter-group dicts, got one Tensor")
        groups = list(params)
        if not groups:
            raise ValueError(f"params: {type(self).__name__} got an empty parameter list; pass model.parameters()")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyper-parameters; the defaults fill in the rest.

        >>> from nbcoll import nn, optim
        >>> body, head = nn.Linear(2, 2), nn.Linear(2, 1)
        >>> optimizer = optim.SGD(body.parameters(), lr=0.1)
        >>> optimizer.add_param_group({"params": head.parameters(), "lr": 0.01})
        >>> [group["lr"] for group in optimizer.param_groups]
        [0.1, 0.01]
        """
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError("param_groups: each group must be a dict with a 'params' entry")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError(f"params: {type(self).__name__} got a parameter group with no parameters")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"params[{i}]: expected a Tensor, got {type(p).__name__}")
            # Frozen parameters (requires_grad False) are accepted, as in PyTorch: they never get a gradient, so
            # step() skips them, and model.parameters() of a partly frozen model can be passed as it is.
            if not p.is_leaf:
                raise ValueError(f"params[{i}]: expected a leaf tensor (a parameter), got the result of an operation")
            if id(p) in seen:
                raise ValueError(f"params[{i}]: this parameter appears in more than one place")
            seen.add(id(p))
        unknown = set(group) - set(self.defaults) - {"params", "initial_lr"}
        if unknown:
            raise ValueError(f"param_groups: unknown settings {sorted(unknown)} for {type(self).__name__}")
        full = {**self.defaults, **group, "params": params}
        self._check_group(full)
        self.param_groups.append(full)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate a group's hyper-parameters; subclasses add their own checks."""
        if not group["lr"] >= 0:
            raise ValueError(f"lr: must be >= 0, got {group['lr']}")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``grad = None``, the default) or fill it with zeros.

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> model = nn.Linear(2, 1)
        >>> optimizer = optim.SGD(model.parameters(), lr=0.1)
        >>> model(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
        >>> optimizer.zero_grad()
        >>> print(model.weight.grad)
        None
        """
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = Tensor._from_array(full(p.shape, 0, p.dtype))

    def step(self) -> None:
        """Update every parameter that has a gradient, one fused kernel launch per parameter.

        A parameter without a gradient (frozen, or unused by this step's loss) is skipped: its state is neither
        created nor advanced, so Adam's step count is per parameter, as in PyTorch.

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> w = nn.Parameter(nbcoll.tensor([1.0, 1.0]))
        >>> optimizer = optim.SGD([w], lr=0.5)
        >>> (w * nbcoll.tensor([1.0, -1.0])).sum().backward()
        >>> optimizer.step()                          # w -= lr * grad
        >>> w.numpy()
        array([0.5, 1.5], dtype=float32)
        """
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                self._update(p, p.grad.data, group, self.state.setdefault(p, {}))

    def _update(self, param: Tensor, grad: Any, group: dict[str, Any], state: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- checkpoints -------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {name: NumPy array or number}}, "param_groups": [{..., "params": [index]}]}``.

        Parameters are numbered in the order of the groups, as PyTorch does, so the dict can be saved with
        :func:`nbcoll.save` and loaded into an optimizer built the same way over another copy of the model.

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> w = nn.Parameter(nbcoll.tensor([1.0]))
        >>> optimizer = optim.SGD([w], lr=0.5, momentum=0.9)
        >>> (w * 2).sum().backward()
        >>> optimizer.step()
        >>> state = optimizer.state_dict()
        >>> state["state"], state["param_groups"][0]["params"]
        ({0: {'momentum_buffer': array([2.], dtype=float32)}}, [0])
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            settings = {k: v for k, v in group.items() if k != "params"}
            groups.append({**settings, "params": [index[id(p)] for p in group["params"]]})
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state and self.state[p]:
                    state[index[id(p)]] = {k: _to_saved(v, p) for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore hyper-parameters and state saved by :meth:`state_dict`; the groups must match in size.

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> w = nn.Parameter(nbcoll.tensor([1.0]))
        >>> optimizer = optim.SGD([w], lr=0.5, momentum=0.9)
        >>> (w * 2).sum().backward()
        >>> optimizer.step()
        >>> resumed = optim.SGD([nn.Parameter(nbcoll.tensor([1.0]))], lr=0.1, momentum=0.9)
        >>> resumed.load_state_dict(optimizer.state_dict())
        >>> resumed.param_groups[0]["lr"], list(resumed.state.values())[0]["momentum_buffer"]
        (0.5, array([2.], dtype=float32))
        """
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        if groups is None or "state" not in state_dict:
            raise ValueError("state_dict: expected a dict with 'state' and 'param_groups', from Optimizer.state_dict()")
        if len(groups) != len(self.param_groups):
            raise ValueError(
                f"state_dict: has {len(groups)} parameter groups, this optimizer has {len(self.param_groups)}"
            )
        params_by_index: dict[int, Tensor] = {}
        for g, (saved, group) in enumerate(zip(groups, self.param_groups, strict=True)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"state_dict: parameter group {g} has {len(saved['params'])} parameters, "
                    f"this optimizer's has {len(group['params'])}"
                )
            params_by_index.update(zip((int(i) for i in saved["params"]), group["params"], strict=True))
        state: dict[Tensor, dict[str, Any]] = {}
        for key, saved_state in state_dict["state"].items():
            p = params_by_index.get(int(key))
            if p is None:
                raise ValueError(f"state_dict: state for parameter {key}, which no parameter group lists")
            state[p] = {name: _to_state(value, p, f"state[{key}][{name!r}]") for name, value in saved_state.items()}
        for saved, group in zip(groups, self.param_groups, strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
        self.state = state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            settings = ", ".join(f"{k}={v}" for k, v in group.items() if k != "params")
            lines.append(f"  group {i}: {len(group['params'])} parameters, {settings}")
        return "\n".join(lines + [")"])


def _to_saved(value: Any, param: Tensor) -> Any:
    """A state entry as saved: device arrays become NumPy copies of the parameter's shape, numbers stay numbers."""
    if memory.is_device_array(value):
        return memory.to_host(value).reshape(param.shape)
    return value


def _to_state(value: Any, param: Tensor, where: str) -> Any:
    """A saved state entry back on the device, checked against its parameter's shape; numbers stay numbers."""
    if isinstance(value, Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        if value.shape != param.shape:
            raise ValueError(f"{where}: expected shape {param.shape} (the parameter's), got {value.shape}")
        return from_host(np.array(value, dtype=param.dtype, order="C"))
    return value.item() if isinstance(value, np.generic) else value
