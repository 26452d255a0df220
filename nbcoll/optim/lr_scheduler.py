"""Learning-rate schedules: a function of the epoch (or step) count that sets every group's ``lr``.

Each scheduler remembers the learning rate each group started with (``initial_lr``) and, on :meth:`step`,
sets ``group["lr"] = lr_at(initial_lr, epoch)`` from a closed formula, so a schedule restored from a checkpoint
continues exactly where it stopped. As in PyTorch, constructing a scheduler applies epoch 0, and ``step()``
is called once per epoch (or per batch), after ``optimizer.step()``.

Any optimizer-like object with ``param_groups`` (a list of dicts with an ``"lr"``) can be scheduled, such as
:class:`~nbcoll.parallel.zero.ZeroRedundancyOptimizer`. A group added with ``add_param_group`` after the scheduler
was built is treated as PyTorch treats it: it gets no ``initial_lr`` and starts from the ``lr`` it was added with;
:class:`StepLR` multiplies it by ``gamma`` at each following boundary (PyTorch's StepLR scales every group's
current ``lr``), while a closed-form schedule such as :class:`CosineWarmupLR` has no base rate for it and leaves its
``lr`` alone (as PyTorch's closed-form and lambda schedules do).
"""

from __future__ import annotations

import bisect
import math
from typing import Any


class LRScheduler:
    """Base class: subclasses define :meth:`lr_at`.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> optimizer = optim.SGD(nn.Linear(2, 1).parameters(), lr=0.8)
        >>> scheduler = optim.StepLR(optimizer, step_size=10, gamma=0.5)
        >>> for epoch in range(30):
        ...     optimizer.step()                  # one epoch of training
        ...     scheduler.step()
        >>> scheduler.get_last_lr()             # 0.8 * 0.5 ** 3
        [0.1]
    """

    def __init__(self, optimizer: Any) -> None:
        groups = getattr(optimizer, "param_groups", None)
        if not isinstance(groups, list) or not all(isinstance(g, dict) and "lr" in g for g in groups):
            raise TypeError(
                "optimizer: expected an optimizer with param_groups (a list of dicts with an 'lr'), "
                f"got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = -1
        self.step()

    def lr_at(self, base_lr: float, epoch: int) -> float:
        """The learning rate of epoch ``epoch`` for a group that started at ``base_lr``; each schedule defines it.

        >>> from nbcoll import nn, optim
        >>> scheduler = optim.StepLR(optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0), step_size=2, gamma=0.5)
        >>> [scheduler.lr_at(1.0, epoch) for epoch in range(5)]
        [1.0, 1.0, 0.5, 0.5, 0.25]
        """
        raise NotImplementedError

    def step(self) -> None:
        """Advance one epoch and set every group's learning rate for it.

        >>> from nbcoll import nn, optim
        >>> optimizer = optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0)
        >>> scheduler = optim.StepLR(optimizer, step_size=1, gamma=0.5)
        >>> scheduler.step()
        >>> optimizer.param_groups[0]["lr"]
        0.5
        """
        self.last_epoch += 1
        self._set_lrs()

    def _set_lrs(self) -> None:
        """The schedule for the groups the scheduler was built with; :meth:`_added_group_lr` for later ones."""
        groups = self.optimizer.param_groups
        for group, base in zip(groups, self.base_lrs, strict=False):  # groups may have been added since
            group["lr"] = self.lr_at(base, self.last_epoch)
        for group in groups[len(self.base_lrs) :]:
            group["lr"] = self._added_group_lr(group["lr"], self.last_epoch)

    def _added_group_lr(self, lr: float, epoch: int) -> float:
        """The lr at ``epoch`` of a group added after construction, whose lr was ``lr``: unchanged by default."""
        return lr

    def get_last_lr(self) -> list[float]:
        """The learning rate of every group, as last set.

        >>> from nbcoll import nn, optim
        >>> scheduler = optim.StepLR(optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1), step_size=5)
        >>> scheduler.get_last_lr()
        [0.1]
        """
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer: the settings, ``base_lrs`` and ``last_epoch``.

        >>> from nbcoll import nn, optim
        >>> scheduler = optim.StepLR(optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1), step_size=5)
        >>> scheduler.state_dict()
        {'step_size': 5, 'gamma': 0.1, 'base_lrs': [0.1], 'last_epoch': 0}
        """
        return {k: v for k, v in vars(self).items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s values and set the learning rates of the restored epoch.

        >>> from nbcoll import nn, optim
        >>> make = lambda: optim.StepLR(optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0), step_size=1, gamma=0.5)
        >>> first, resumed = make(), make()
        >>> first.step(); first.step()
        >>> resumed.load_state_dict(first.state_dict())
        >>> resumed.get_last_lr()
        [0.25]
        """
        vars(self).update({k: v for k, v in state_dict.items() if k != "optimizer"})
        groups = self.optimizer.param_groups
        for group, base in zip(groups, self.base_lrs, strict=False):  # added groups keep the optimizer's lr
            group["lr"] = self.lr_at(base, self.last_epoch)


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` epochs.

    ``lr(epoch) = base * gamma ** (epoch // step_size)``

    Example::

        >>> from nbcoll import nn, optim
        >>> optimizer = optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0)
        >>> scheduler = optim.StepLR(optimizer, step_size=30, gamma=0.1)   # PyTorch's default gamma
        >>> scheduler.lr_at(1.0, 29), scheduler.lr_at(1.0, 30)
        (1.0, 0.1)
    """

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1) -> None:
        if not isinstance(step_size, int) or step_size < 1:
            raise ValueError(f"step_size: expected a positive integer, got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)

    def _added_group_lr(self, lr: float, epoch: int) -> float:
        return lr * self.gamma if epoch > 0 and epoch % self.step_size == 0 else lr


class CosineWarmupLR(LRScheduler):
    """A linear warm-up from ``base / warmup_steps`` to ``base``, then a cosine decay to ``min_lr``.

    Example::

        >>> from nbcoll import nn, optim
        >>> optimizer = optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0)
        >>> scheduler = optim.CosineWarmupLR(optimizer, warmup_steps=4, total_steps=12)
        >>> lrs = []
        >>> for step in range(14):
        ...     lrs.append(round(scheduler.get_last_lr()[0], 3))
        ...     optimizer.step()
        ...     scheduler.step()
        >>> lrs
        [0.25, 0.5, 0.75, 1.0, 1.0, 0.962, 0.854, 0.691, 0.5, 0.309, 0.146, 0.038, 0.0, 0.0]

    With ``w = warmup_steps`` and ``T = total_steps``::

        lr(t) = base * (t + 1) / w                                                    for t < w
        lr(t) = min_lr + (base - min_lr) * (1 + cos(pi * (t - w) / (T - w))) / 2      for w <= t <= T
        lr(t) = min_lr                                                                for t > T

    The warm-up never gives a zero learning rate: the first step already moves the parameters.
    """

    def __init__(self, optimizer: Any, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> None:
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps: expected an integer >= 0, got {warmup_steps!r}")
        if not isinstance(total_steps, int) or total_steps <= warmup_steps:
            raise ValueError(f"total_steps: expected an integer > warmup_steps ({warmup_steps}), got {total_steps!r}")
        if not min_lr >= 0:
            raise ValueError(f"min_lr: must be >= 0, got {min_lr}")
        self.warmup_steps, self.total_steps, self.min_lr = warmup_steps, total_steps, min_lr
        super().__init__(optimizer)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        if epoch < self.warmup_steps:
            return base_lr * (epoch + 1) / self.warmup_steps
        if epoch > self.total_steps:
            return self.min_lr
        progress = (epoch - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.min_lr + (base_lr - self.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


class LinearLR(LRScheduler):
    """Scale the learning rate by a factor going linearly from ``start_factor`` to ``end_factor`` (PyTorch's).

    ``lr(epoch) = base * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters)``:
    a warm-up when ``start_factor < end_factor``, then the rate stays at ``base * end_factor``.

    Example::

        >>> from nbcoll import nn, optim
        >>> optimizer = optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0)
        >>> scheduler = optim.LinearLR(optimizer, start_factor=0.25, end_factor=1.0, total_iters=3)
        >>> [round(scheduler.lr_at(1.0, epoch), 3) for epoch in range(5)]
        [0.25, 0.5, 0.75, 1.0, 1.0]
    """

    def __init__(
        self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5
    ) -> None:
        if not 0 < start_factor <= 1:
            raise ValueError(f"start_factor: expected a number in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"end_factor: expected a number in [0, 1], got {end_factor}")
        if not isinstance(total_iters, int) or total_iters < 1:
            raise ValueError(f"total_iters: expected a positive integer, got {total_iters!r}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        progress = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at each of ``milestones`` (PyTorch's).

    Scheduler ``k`` takes over at epoch ``milestones[k - 1]`` and starts from its own epoch 0 there, so a
    warm-up and a decay compose::

        lr(epoch) = schedulers[k].lr_at(base, epoch - milestones[k - 1]),   k = number of milestones <= epoch

    Example::

        >>> from nbcoll import nn, optim
        >>> optimizer = optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0)
        >>> warmup = optim.LinearLR(optimizer, start_factor=0.5, total_iters=2)
        >>> cosine = optim.CosineWarmupLR(optimizer, warmup_steps=0, total_steps=4)
        >>> scheduler = optim.SequentialLR(optimizer, [warmup, cosine], milestones=[2])
        >>> lrs = []
        >>> for epoch in range(7):
        ...     lrs.append(round(scheduler.get_last_lr()[0], 3))
        ...     optimizer.step()
        ...     scheduler.step()
        >>> lrs
        [0.5, 0.75, 1.0, 0.854, 0.5, 0.146, 0.0]

    :meth:`state_dict` holds the schedulers' own state dicts under ``"_schedulers"``.
    """

    def __init__(self, optimizer: Any, schedulers: list[LRScheduler], milestones: list[int]) -> None:
        schedulers, milestones = list(schedulers), list(milestones)
        if not schedulers:
            raise ValueError("schedulers: expected at least one scheduler")
        for k, scheduler in enumerate(schedulers):
            if not isinstance(scheduler, LRScheduler) or scheduler.optimizer is not optimizer:
                raise ValueError(f"schedulers[{k}]: expected a scheduler of this optimizer, got {scheduler!r}")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"milestones: expected {len(schedulers) - 1} (one fewer than the schedulers), got {len(milestones)}"
            )
        if any(not isinstance(m, int) or m < 1 for m in milestones) or milestones != sorted(set(milestones)):
            raise ValueError(f"milestones: expected increasing positive integers, got {milestones}")
        self._schedulers, self.milestones = schedulers, milestones
        super().__init__(optimizer)

    def _active(self, epoch: int) -> tuple[LRScheduler, int]:
        """The scheduler in charge at ``epoch`` and the epoch in its own count."""
        k = bisect.bisect_right(self.milestones, epoch)
        return self._schedulers[k], epoch - (self.milestones[k - 1] if k else 0)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        scheduler, own_epoch = self._active(epoch)
        return scheduler.lr_at(base_lr, own_epoch)

    def step(self) -> None:
        super().step()
        scheduler, own_epoch = self._active(self.last_epoch)
        scheduler.last_epoch = own_epoch  # its own count stays readable, as in PyTorch

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in vars(self).items() if k not in ("optimizer", "_schedulers")}
        return {**state, "_schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        saved = state.pop("_schedulers", None)
        if saved is None or len(saved) != len(self._schedulers):
            raise ValueError(f"state_dict: expected '_schedulers' with {len(self._schedulers)} state dicts")
        for scheduler, scheduler_state in zip(self._schedulers, saved, strict=True):
            scheduler.load_state_dict(scheduler_state)
        super().load_state_dict(state)
