"""``GradScaler``: dynamic loss scaling, so that small float16 gradients do not flush to zero.

float16's smallest normal number is 6e-5; gradients below it lose precision or vanish. The scaler multiplies the
loss by ``scale`` before backward, so every gradient is ``scale`` times larger, and divides them again before the
optimizer steps. A too-large scale overflows some gradient to inf or NaN: that step is skipped and the scale
halved. After ``growth_interval`` steps in a row without overflow the scale doubles again (PyTorch's rule)::

    scale(loss)          loss * scale
    unscale_(optimizer)  for each gradient g: g = g / scale;  found_inf = any g not finite
    step(optimizer)      unscale_ if not done yet;  optimizer.step() unless found_inf
    update()             found_inf:  scale *= backoff_factor, tracker = 0
                         otherwise:  tracker += 1;  tracker == growth_interval: scale *= growth_factor, tracker = 0

Example::

    scaler = nbcoll.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        with nbcoll.autocast(dtype=np.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)                   # skipped when a gradient overflowed
        scaler.update()
    nbcoll.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, "ckpt.npz")
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.tensors import Tensor, no_grad

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """Scale the loss, unscale the gradients, skip the steps that overflowed, and adapt the scale.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll.amp import GradScaler
        >>> w = nbcoll.nn.Parameter(nbcoll.tensor([1.0, 2.0]))
        >>> optimizer = nbcoll.optim.SGD([w], lr=0.1)
        >>> scaler = GradScaler(init_scale=1024.0)
        >>> scaler.scale((w * w).sum()).backward()          # gradients 1024 times too large
        >>> scaler.step(optimizer)                          # unscaled first: w -= 0.1 * 2 * w
        >>> scaler.update()
        >>> w.numpy(), scaler.get_scale()
        (array([0.8, 1.6], dtype=float32), 1024.0)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled: expected True or False, got {enabled!r}")
        if not float(init_scale) > 0:
            raise ValueError(f"init_scale: expected a positive number, got {init_scale!r}")
        if not float(growth_factor) > 1.0:
            raise ValueError(f"growth_factor: expected a number > 1, got {growth_factor!r}")
        if not 0.0 < float(backoff_factor) < 1.0:
            raise ValueError(f"backoff_factor: expected a number in (0, 1), got {backoff_factor!r}")
        whole_number = isinstance(growth_interval, int | np.integer) and not isinstance(growth_interval, bool)
        if not whole_number or growth_interval < 1:
            raise ValueError(f"growth_interval: expected an int >= 1, got {growth_interval!r}")
        self._enabled = enabled
        self._scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0  # steps in a row without overflow
        self._per_optimizer: dict[int, dict[str, Any]] = {}  # id(optimizer) -> its stage and found_inf this step

    def is_enabled(self) -> bool:
        """Whether the scaler scales (a disabled one passes everything through, as in PyTorch).

        >>> from nbcoll.amp import GradScaler
        >>> GradScaler(enabled=False).is_enabled()
        False
        """
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled).

        >>> from nbcoll.amp import GradScaler
        >>> GradScaler().get_scale()
        65536.0
        """
        return self._scale if self._enabled else 1.0

    def scale(self, outputs: Any) -> Any:
        """``outputs * scale``: a Tensor, or each Tensor of a list or tuple; unchanged when disabled.

        >>> import nbcoll
        >>> from nbcoll.amp import GradScaler
        >>> GradScaler(init_scale=8.0).scale(nbcoll.tensor(0.5)).item()
        4.0
        """
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if outputs.dtype.kind != "f":
                raise TypeError(f"outputs: expected a floating Tensor (the loss), got dtype {outputs.dtype}")
            return outputs * self._scale
        if isinstance(outputs, list | tuple):
            return type(outputs)(self.scale(o) for o in outputs)
        raise TypeError(f"outputs: expected a Tensor or a list or tuple of Tensors, got {type(outputs).__name__}")

    def unscale_(self, optimizer: Any) -> None:
        """Divide the optimizer's gradients by the scale, in place, and note whether any is inf or NaN.

        Call it before clipping gradients; ``step`` then does not unscale again. Once per optimizer per step.

        >>> import nbcoll
        >>> from nbcoll.amp import GradScaler
        >>> w = nbcoll.nn.Parameter(nbcoll.tensor([3.0]))
        >>> optimizer = nbcoll.optim.SGD([w], lr=0.1)
        >>> scaler = GradScaler(init_scale=4.0)
        >>> scaler.scale(w.sum()).backward()
        >>> scaler.unscale_(optimizer)
        >>> w.grad.numpy()
        array([1.], dtype=float32)
        """
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_: already called on this optimizer since the last update()")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_: called after step(); call update() first")
        inv_scale = 1.0 / self._scale  # a power of two while the factors are, so dividing is exact
        found_inf = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad * inv_scale
                    found_inf = found_inf or not bool(np.isfinite(grad.numpy()).all())
                    p.grad = grad
        state["stage"], state["found_inf"] = _UNSCALED, found_inf

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step()`` on unscaled gradients, or nothing when one of them is inf or NaN.

        Returns what ``optimizer.step`` returns, or None when the step was skipped.

        >>> import numpy as np, nbcoll
        >>> from nbcoll.amp import GradScaler
        >>> w = nbcoll.nn.Parameter(nbcoll.tensor([1.0]))
        >>> optimizer = nbcoll.optim.SGD([w], lr=0.1)
        >>> scaler = GradScaler()
        >>> w.grad = nbcoll.tensor([np.inf], dtype=np.float32)      # an overflowed gradient
        >>> scaler.step(optimizer)                                  # skipped
        >>> scaler.update()
        >>> w.numpy(), scaler.get_scale()
        (array([1.], dtype=float32), 32768.0)
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        state = self._state(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step: already called on this optimizer since the last update()")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        state["stage"] = _STEPPED
        return None if state["found_inf"] else optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | None = None) -> None:
        """Adapt the scale after the step(s): back off if any optimizer found inf/NaN, else maybe grow.

        ``new_scale`` sets the scale instead.

        >>> from nbcoll.amp import GradScaler
        >>> scaler = GradScaler(init_scale=4.0, growth_interval=1)
        >>> scaler.update()                       # no step found an overflow: one good step, so it grows
        >>> scaler.get_scale()
        8.0
        """
        if not self._enabled:
            return
        if new_scale is not None:
            if not float(new_scale) > 0:
                raise ValueError(f"new_scale: expected a positive number, got {new_scale!r}")
            self._scale = float(new_scale)
        elif any(s["found_inf"] for s in self._per_optimizer.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._per_optimizer.clear()

    def state_dict(self) -> dict[str, Any]:
        """The scale and its rule, PyTorch's keys: what ``load_state_dict`` needs to resume bit-exact.

        >>> from nbcoll.amp import GradScaler
        >>> sorted(GradScaler().state_dict())
        ['_growth_tracker', 'backoff_factor', 'growth_factor', 'growth_interval', 'scale']
        """
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (a scaler's own, or one read back with ``nbcoll.load``).

        >>> from nbcoll.amp import GradScaler
        >>> scaler = GradScaler()
        >>> scaler.load_state_dict({**GradScaler().state_dict(), "scale": 512.0})
        >>> scaler.get_scale()
        512.0
        """
        if not self._enabled:
            raise RuntimeError("load_state_dict: this GradScaler is disabled; build it with enabled=True")
        keys = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
        if not isinstance(state_dict, dict) or not keys <= set(state_dict):
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ValueError(f"state_dict: expected a dict with keys {sorted(keys)}, got {got}")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])

    def _state(self, optimizer: Any) -> dict[str, Any]:
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"optimizer: expected an optimizer with param_groups, got {type(optimizer).__name__}")
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": False})

    def __repr__(self) -> str:
        return f"GradScaler(scale={self.get_scale()}, growth_tracker={self._growth_tracker}, enabled={self._enabled})"


__all__ = ["GradScaler"]
