"""Post-local SGD (Lin et al. 2020): synchronous DDP for a warm-up, then each rank steps alone and the replicas
average their parameters every ``period`` steps, with PyTorch's names (``torch.distributed.algorithms``)::

    step < warmup_steps:    DDP: gradients averaged every step (post_localSGD_hook), the replicas stay equal
    afterwards:             each rank: optimizer.step() on its own gradient (the hook sends nothing)
                            every period-th step: parameters = all_reduce(parameters, avg)

With ``period = 1`` this is DDP again for SGD, whose step is linear in the gradient: the mean of the ranks' steps
is the step of the mean gradient. Larger periods send the model once every ``period`` steps instead of the
gradients every step.

Example::

    model = DistributedDataParallel(model, comm)
    model.register_comm_hook(PostLocalSGDState(comm, None, start_localSGD_iter=100), post_localSGD_hook)
    averager = PeriodicModelAverager(period=4, warmup_steps=100, process_group=comm)
    optimizer = PostLocalSGDOptimizer(optim.SGD(model.parameters(), lr=0.1), averager)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nbcoll.kernels import copy as copy_kernels
from nbcoll.parallel.comm_hooks import allreduce_hook
from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.comm import Communicator
    from nbcoll.parallel.buckets import Bucket


class PostLocalSGDState:
    """The hook's state: the backward passes counted, and who averages gradients after ``start_localSGD_iter``.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import DistributedDataParallel, PostLocalSGDState, post_localSGD_hook
    >>> comm = nbcoll.init()
    >>> model = DistributedDataParallel(nn.Linear(2, 1), comm)
    >>> state = PostLocalSGDState(comm, None, start_localSGD_iter=1)
    >>> model.register_comm_hook(state, post_localSGD_hook)
    >>> for _ in range(3):
    ...     model(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
    >>> state.iter                                    # counted until local SGD starts
    1
    >>> comm.destroy()

    ``subgroup`` is a communicator whose ranks keep averaging gradients after the warm-up; None means no one:
    every rank steps on its own gradient (PyTorch's None builds one subgroup per node instead).
    ``post_local_gradient_allreduce=False`` skips the subgroup's averaging too.
    """

    def __init__(
        self,
        process_group: Communicator | None,
        subgroup: Communicator | None,
        start_localSGD_iter: int,  # noqa: N803 - PyTorch's name
        post_local_gradient_allreduce: bool = True,
    ) -> None:
        if not isinstance(start_localSGD_iter, int) or start_localSGD_iter < 0:
            raise ValueError(f"start_localSGD_iter: expected an integer >= 0, got {start_localSGD_iter!r}")
        self.process_group, self.subgroup = process_group, subgroup
        self.start_localSGD_iter = start_localSGD_iter
        self.post_local_gradient_allreduce = post_local_gradient_allreduce
        self.iter = 0

    def maybe_increase_iter(self, bucket: Bucket) -> None:
        """Count one backward pass when the last bucket of a pass is reduced.

        >>> from nbcoll.parallel import PostLocalSGDState
        >>> from nbcoll.parallel.buckets import Bucket
        >>> state = PostLocalSGDState(None, None, start_localSGD_iter=10)
        >>> state.maybe_increase_iter(Bucket(0, [], [], [], None, last=True)); state.iter
        1
        """
        if bucket.is_last():
            self.iter += 1


def post_localSGD_hook(state: PostLocalSGDState, bucket: Bucket) -> Any:  # noqa: N802 - PyTorch's name
    """Average over ``process_group`` for the first ``start_localSGD_iter`` passes, then over ``subgroup`` (or not).

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import DistributedDataParallel, PostLocalSGDState, post_localSGD_hook
    >>> comm = nbcoll.init()
    >>> model = DistributedDataParallel(nn.Linear(2, 1), comm)
    >>> model.register_comm_hook(PostLocalSGDState(comm, None, start_localSGD_iter=0), post_localSGD_hook)
    >>> comm.reset_counters()
    >>> model(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
    >>> comm.counters.bytes_sent, model.module.weight.grad.numpy()       # nothing sent: the rank's own gradient
    (0, array([[1., 2.]], dtype=float32))
    >>> comm.destroy()
    """
    if state.iter < state.start_localSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)
    if state.subgroup is None or not state.post_local_gradient_allreduce:
        return bucket.buffer()
    return allreduce_hook(state.subgroup, bucket)


def _parameters(params: Iterable[Any]) -> list[Tensor]:
    """Parameters, given as Tensors or as optimizer parameter groups (dicts with ``"params"``)."""
    out: list[Tensor] = []
    for item in params:
        out.extend(item["params"] if isinstance(item, dict) else [item])
    return out


class PeriodicModelAverager:
    """Average the parameters over ``process_group`` every ``period`` steps once ``warmup_steps`` have passed.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import PeriodicModelAverager
    >>> comm = nbcoll.init()
    >>> averager = PeriodicModelAverager(period=2, warmup_steps=1, process_group=comm)
    >>> w = nn.Parameter(nbcoll.tensor([1.0]))
    >>> due = []
    >>> for _ in range(6):
    ...     due.append(averager.due()); averager.average_parameters([w])
    >>> due, averager.step
    ([False, True, False, True, False, True], 6)
    >>> comm.destroy()
    """

    def __init__(self, period: int = 1, warmup_steps: int = 0, process_group: Communicator | None = None) -> None:
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"period: expected a positive integer, got {period!r}")
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps: expected an integer >= 0, got {warmup_steps!r}")
        if process_group is None:
            raise ValueError("process_group: expected the communicator whose ranks average their parameters")
        self.period, self.warmup_steps, self.process_group = period, warmup_steps, process_group
        self.step = 0

    def due(self) -> bool:
        """Whether the parameters are averaged at the current step.

        >>> import nbcoll
        >>> from nbcoll.parallel import PeriodicModelAverager
        >>> comm = nbcoll.init()
        >>> averager = PeriodicModelAverager(period=4, warmup_steps=2, process_group=comm)
        >>> averager.due(), averager.step
        (False, 0)
        >>> comm.destroy()
        """
        return self.step >= self.warmup_steps and (self.step - self.warmup_steps) % self.period == 0

    def average_parameters(self, params: Iterable[Any]) -> None:
        """At a due step, replace every parameter by its mean over the ranks (one all-reduce per dtype); count it.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PeriodicModelAverager
        >>> comm = nbcoll.init()
        >>> averager = PeriodicModelAverager(period=1, process_group=comm)
        >>> w = nn.Parameter(nbcoll.tensor([2.0]))
        >>> averager.average_parameters([w]); w.numpy(), averager.step      # one rank: its own value
        (array([2.], dtype=float32), 1)
        >>> comm.destroy()
        """
        if self.due():
            by_dtype: dict[Any, list[Tensor]] = {}
            for p in _parameters(params):
                by_dtype.setdefault(p.dtype, []).append(p)
            for group in by_dtype.values():
                arrays = [copy_kernels.contiguous(p.data) for p in group]
                flat = self.process_group.all_reduce(copy_kernels.flatten(arrays), op="avg")
                for p, array in zip(group, copy_kernels.unflatten(flat, arrays), strict=True):
                    p.data = array
        self.step += 1


class PostLocalSGDOptimizer:
    """An optimizer whose every step is followed by the averager's (PyTorch's wrapper of the same name).

    >>> import nbcoll
    >>> from nbcoll import nn, optim
    >>> from nbcoll.parallel import PeriodicModelAverager, PostLocalSGDOptimizer
    >>> comm = nbcoll.init()
    >>> w = nn.Parameter(nbcoll.tensor([1.0]))
    >>> optimizer = PostLocalSGDOptimizer(optim.SGD([w], lr=0.5), PeriodicModelAverager(2, 0, comm))
    >>> (w * 2.0).sum().backward()
    >>> optimizer.step(); w.numpy(), optimizer.state_dict()["step"]
    (array([0.], dtype=float32), 1)
    >>> comm.destroy()
    """

    def __init__(self, optim: Any, averager: PeriodicModelAverager) -> None:
        if not hasattr(optim, "param_groups") or not hasattr(optim, "step"):
            raise TypeError(f"optim: expected an optimizer, got {type(optim).__name__}")
        if not isinstance(averager, PeriodicModelAverager):
            raise TypeError(f"averager: expected a PeriodicModelAverager, got {type(averager).__name__}")
        self.optim, self.averager = optim, averager

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The wrapped optimizer's groups (schedulers set their ``lr`` here).

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> from nbcoll.parallel import PeriodicModelAverager, PostLocalSGDOptimizer
        >>> comm = nbcoll.init()
        >>> sgd = optim.SGD([nn.Parameter(nbcoll.tensor([1.0]))], lr=0.5)
        >>> PostLocalSGDOptimizer(sgd, PeriodicModelAverager(process_group=comm)).param_groups[0]["lr"]
        0.5
        >>> comm.destroy()
        """
        return self.optim.param_groups

    @property
    def state(self) -> dict[Any, Any]:
        """The wrapped optimizer's per-parameter state.

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> from nbcoll.parallel import PeriodicModelAverager, PostLocalSGDOptimizer
        >>> comm = nbcoll.init()
        >>> sgd = optim.SGD([nn.Parameter(nbcoll.tensor([1.0]))], lr=0.5)
        >>> PostLocalSGDOptimizer(sgd, PeriodicModelAverager(process_group=comm)).state
        {}
        >>> comm.destroy()
        """
        return self.optim.state

    def step(self) -> None:
        """The wrapped optimizer's step, then the averager's (which averages when it is due).

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> from nbcoll.parallel import PeriodicModelAverager, PostLocalSGDOptimizer
        >>> comm = nbcoll.init()
        >>> w = nn.Parameter(nbcoll.tensor([1.0]))
        >>> optimizer = PostLocalSGDOptimizer(optim.SGD([w], lr=0.5), PeriodicModelAverager(process_group=comm))
        >>> (w * 1.0).sum().backward(); optimizer.step(); optimizer.averager.step
        1
        >>> comm.destroy()
        """
        self.optim.step()
        self.averager.average_parameters(self.optim.param_groups)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The wrapped optimizer's ``zero_grad``.

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> from nbcoll.parallel import PeriodicModelAverager, PostLocalSGDOptimizer
        >>> comm = nbcoll.init()
        >>> w = nn.Parameter(nbcoll.tensor([1.0]))
        >>> optimizer = PostLocalSGDOptimizer(optim.SGD([w], lr=0.5), PeriodicModelAverager(process_group=comm))
        >>> (w * 1.0).sum().backward(); optimizer.zero_grad(); print(w.grad)
        None
        >>> comm.destroy()
        """
        self.optim.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict, with the averager's step count under ``"step"``.

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> from nbcoll.parallel import PeriodicModelAverager, PostLocalSGDOptimizer
        >>> comm = nbcoll.init()
        >>> sgd = optim.SGD([nn.Parameter(nbcoll.tensor([1.0]))], lr=0.5)
        >>> sorted(PostLocalSGDOptimizer(sgd, PeriodicModelAverager(process_group=comm)).state_dict())
        ['param_groups', 'state', 'step']
        >>> comm.destroy()
        """
        return {**self.optim.state_dict(), "step": self.averager.step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the wrapped optimizer and the averager's step count (so averaging resumes on schedule).

        >>> import nbcoll
        >>> from nbcoll import nn, optim
        >>> from nbcoll.parallel import PeriodicModelAverager, PostLocalSGDOptimizer
        >>> comm = nbcoll.init()
        >>> make = lambda: PostLocalSGDOptimizer(
        ...     optim.SGD([nn.Parameter(nbcoll.tensor([1.0]))], lr=0.5), PeriodicModelAverager(process_group=comm))
        >>> resumed = make()
        >>> resumed.load_state_dict({**make().state_dict(), "step": 7}); resumed.averager.step
        7
        >>> comm.destroy()
        """
        state = dict(state_dict)
        if "step" not in state:
            raise ValueError("state_dict: expected the averager's 'step', from PostLocalSGDOptimizer.state_dict()")
        self.averager.step = int(state.pop("step"))
        self.optim.load_state_dict(state)


__all__ = ["PeriodicModelAverager", "PostLocalSGDOptimizer", "PostLocalSGDState", "post_localSGD_hook"]
