"""``fully_shard``: each rank keeps one dim-0 shard of every parameter (ZeRO stage 3), gathered only while used.

Every layer that owns parameters becomes a *unit*. Its parameters are replaced by their shards: rows
``[rank * R, (rank + 1) * R)`` of the parameter padded to ``R * ranks`` rows, ``R = ceil(rows / ranks)`` (uneven
shards are padded, never dropped). The optimizer is built on ``model.parameters()``, which are the shards. A
unit's forward is one autograd Function::

    forward:   full = all_gather(shards)[:rows]            the whole parameters, only for this layer (one
                                                           all-gather of the layer's flat shards, then one
                                                           batched copy from rank order to parameter order)
               y = layer.forward(x) with full, recording nothing;  keep x;  free full
    backward:  full = all_gather(shards)[:rows]            gathered again
               y = layer.forward(x) with full, recorded;  backward(y, dy) gives dx and d full
               shard.grad = reduce_scatter(pad(d full), op="avg");  free full

So between a layer's forward and its backward a rank holds only shards (the layer's forward is recomputed in
backward, as activation checkpointing does), and the gradients are averaged over the ranks by the reduce-scatter,
the dual of the all-gather. While a unit computes, the next unit's all-gather (the previous one's in backward) is
already in flight. A layer's forward must be deterministic (no dropout) and take one Tensor.

``mixed_precision=MixedPrecision(param_dtype, reduce_dtype, buffer_dtype)`` is FSDP's policy: the shards stay the
float32 masters the optimizer steps; each all-gather sends them cast to ``param_dtype``, so a layer's forward and
backward (and its input, cast on the way in) run in it; its gradients are cast to ``reduce_dtype`` (``param_dtype``
when None, as in FSDP) for the reduce-scatter and back to the masters' dtype before the step; a unit's floating
buffers are cast to ``buffer_dtype`` once. ``MixedPrecision()`` casts nothing: it is the same as no policy.

``reshard_after_forward=False`` trades memory for communication: a unit keeps the whole parameters it gathered in
forward until its backward. Its forward then records the layer's graph with them (saved on the unit's node), so
its backward neither gathers nor recomputes, and frees them when it is done: one all-gather per unit per step
instead of two, and every rank holds the whole model from forward to backward, as DDP does.

``model.state_dict()`` of a sharded model moves nothing: it maps each parameter's name to a :class:`Shard`, this
rank's rows and where they sit in the whole parameter; buffers stay plain arrays. The shards of all ranks put
back together (:meth:`Shard.place`) give the one-process state (both in :mod:`nbcoll.parallel.fsdp_state`).

Example::

    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    fully_shard(model, comm)                                   # both Linear layers become units
    optimizer = nbcoll.optim.Adam(model.parameters(), lr=1e-3)  # on the shards
    loss_fn(model(x), y).backward()
    optimizer.step()
    full = gathered_parameters(model)                          # name -> the whole parameter, on every rank
    model.state_dict()["0.weight"]                             # Shard(local=..., row_offset=..., shape=(16, 8))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.nn import Module, Parameter
from nbcoll.parallel.data_parallel import check_same_parameters
from nbcoll.parallel.fsdp_state import Shard, gathered_parameters, sharded_state_dict  # noqa: F401 (as before)
from nbcoll.parallel.mixed_precision import MixedPrecision
from nbcoll.tensors import Tensor, enable_grad, no_grad
from nbcoll.tensors.engine import backward
from nbcoll.tensors.function import Context, Function

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


class ShardedAway(Parameter):
    """What a parameter becomes once ``fully_shard`` has replaced it by its shard.

    An optimizer built before sharding still holds it; reading or writing its gradient (``step``, ``zero_grad``)
    raises, naming it, instead of leaving the model silently untrained.

    Example::

        optimizer = nbcoll.optim.SGD(model.parameters(), lr=0.1)
        fully_shard(model, comm)
        optimizer.step()        # RuntimeError: ... build the optimizer after fully_shard
    """

    @staticmethod
    def mark(param: Parameter, name: str) -> None:
        param.__class__ = ShardedAway  # the same object, so every holder of it sees the change
        param.__dict__["sharded_name"] = name

    def _refuse(self) -> RuntimeError:
        return RuntimeError(
            f"parameter {self.__dict__['sharded_name']!r} was replaced by its shard when its module was fully "
            "sharded; build the optimizer after fully_shard, on model.parameters() (the shards)"
        )

    @property  # type: ignore[override]
    def grad(self) -> Any:
        raise self._refuse()

    @grad.setter
    def grad(self, value: Any) -> None:
        raise self._refuse()


class Schedule:
    """What the units of one sharded model share: the unit that ran last, and the order of events.

    ``events`` records, for the last step, ``("gather", i)`` (an all-gather issued and waited for where it was
    needed), ``("prefetch", i)`` (an all-gather issued early, for the unit expected next), ``("forward", i)`` and
    ``("backward", i)``.
    """

    def __init__(self) -> None:
        self.last_ran: Unit | None = None
        self.events: list[tuple[str, int]] = []


class Unit:
    """One layer's sharded parameters and how to gather them whole and scatter their gradients."""

    def __init__(
        self,
        module: Module,
        comm: Communicator,
        index: int,
        schedule: Schedule,
        reshard_after_forward: bool = True,
        mixed_precision: MixedPrecision | None = None,
    ) -> None:
        self.module, self.comm, self.index, self.schedule = module, comm, index, schedule
        self.reshard_after_forward = reshard_after_forward
        self.next: Unit | None = None  # the units around this one in registration order (forward order)
        self.previous: Unit | None = None
        self._prefetched: tuple[Unit | None, Any, Any] | None = None  # (issued by, work, gathered buffer)
        self.names: list[str] = []
        self.shapes: list[tuple[int, ...]] = []  # the whole parameters' shapes
        self.shards: list[Parameter] = []
        params = [(name, p) for name, p in module._parameters.items() if p is not None]
        for name, p in params:
            if p.ndim == 0:
                raise ValueError(f"module: parameter {name!r} is 0-d; fully_shard splits parameters along dim 0")
            if p.dtype != params[0][1].dtype:
                raise TypeError(f"module: parameter {name!r} is {p.dtype}, the layer's others {params[0][1].dtype}")
        n = comm.size
        # This rank's shards side by side in one flat buffer: parameter k's shard is R_k rows of c_k elements.
        self.sizes = [self.rows(p.shape) * (p.size // p.shape[0]) for _, p in params]  # elements per shard
        self.offsets = [int(o) for o in np.cumsum([0] + self.sizes[:-1])]
        self.flat_shards = memory.zeros(sum(self.sizes), params[0][1].dtype)
        policy = mixed_precision or MixedPrecision()
        self.param_dtype = policy.param_dtype or self.flat_shards.dtype  # what the layer computes in
        self.reduce_dtype = policy.reduce_dtype or self.param_dtype  # what its gradients are averaged in
        for (name, p), size, offset in zip(params, self.sizes, self.offsets, strict=True):
            data = copy_kernels.contiguous(p.data)
            comm.broadcast(data, root=0)  # the ranks start from rank 0's parameters
            padded = memory.zeros(size * n, p.dtype)
            copy_kernels.copy(padded[: p.size], data.reshape(p.size))
            shard_view = self.flat_shards[offset : offset + size]
            copy_kernels.copy(shard_view, padded[comm.rank * size : (comm.rank + 1) * size])
            shard = Parameter(Tensor._from_array(shard_view.reshape((self.rows(p.shape),) + p.shape[1:])))
            shard.requires_grad = p.requires_grad
            module._parameters[name] = shard
            ShardedAway.mark(p, f"{type(module).__name__}.{name}")
            self.names.append(name)
            self.shapes.append(tuple(p.shape))
            self.shards.append(shard)
        # Gathered, rank r's block holds its shard of every parameter; whole, parameter k's padded rows come
        # together. Moving between the two layouts is one batched copy of n x (parameters) segments.
        total = sum(self.sizes)
        self.rank_major = [r * total + o for r in range(n) for o in self.offsets]
        self.param_major = [
            n * o + r * size for r in range(n) for o, size in zip(self.offsets, self.sizes, strict=True)
        ]
        self.lengths = [size for _ in range(n) for size in self.sizes]

    def rows(self, shape: tuple[int, ...]) -> int:
        return -(-shape[0] // self.comm.size)

    def _all_gather(self, async_op: bool, dtype: Any) -> tuple[Any, Any]:
        send = self.flat_shards  # the masters, cast to the compute dtype when a policy asks for one
        if dtype != send.dtype:
            send = copy_kernels.cast(send, dtype)
        gathered = memory.empty(send.size * self.comm.size, dtype)
        return self.comm.all_gather(send, gathered, async_op=async_op), gathered

    def prefetch(self) -> None:
        """Issue this unit's all-gather now, so that it runs while the unit before it computes."""
        if self._prefetched is None:
            self._prefetched = (self.schedule.last_ran, *self._all_gather(True, self.param_dtype))
            self.schedule.events.append(("prefetch", self.index))

    def gather(self, masters: bool = False) -> list[Any]:
        """The whole parameters in ``param_dtype`` (the masters' own dtype with ``masters=True``, which leaves
        any prefetch alone): one all-gather of the flat shards, one batched copy into parameter order.

        A prefetched gather is used only when the unit that issued it is the one that ran just before; any other
        (the model called its layers in another order) is waited for and discarded, as the shards may have
        changed since.
        """
        prefetched = None
        if masters:
            _, gathered = self._all_gather(False, self.flat_shards.dtype)
        else:
            prefetched, self._prefetched = self._prefetched, None
            if prefetched is not None:
                prefetched[1].wait()
        if prefetched is not None and prefetched[0] is self.schedule.last_ran:
            gathered = prefetched[2]
        elif not masters:
            _, gathered = self._all_gather(False, self.param_dtype)
            self.schedule.events.append(("gather", self.index))
        whole = memory.empty(gathered.size, gathered.dtype)
        copy_kernels.batched_copy(whole, gathered, self.rank_major, self.param_major, self.lengths)
        n = self.comm.size
        return [
            whole[n * offset : n * offset + int(np.prod(shape))].reshape(shape)  # the padding rows dropped
            for offset, shape in zip(self.offsets, self.shapes, strict=True)
        ]

    def reduce_scatter(self, grads: list[Any]) -> list[Any]:
        """The whole gradients, padded with zero rows and put in rank order, averaged over the ranks in
        ``reduce_dtype``: this rank receives the flat gradient of its shards, in the masters' dtype."""
        n = self.comm.size
        whole = memory.zeros(self.flat_shards.size * n, self.reduce_dtype)
        for grad, offset, shape in zip(grads, self.offsets, self.shapes, strict=True):
            if grad is not None:  # cast_into copies when the dtypes are the same
                size = int(np.prod(shape))
                flat = copy_kernels.contiguous(grad).reshape(size)
                copy_kernels.cast_into(whole[n * offset : n * offset + size], flat)
        by_rank = memory.empty(whole.size, whole.dtype)
        copy_kernels.batched_copy(by_rank, whole, self.param_major, self.rank_major, self.lengths)
        mine = memory.empty(self.flat_shards.size, whole.dtype)
        self.comm.reduce_scatter(by_rank, mine, op="avg")
        if mine.dtype != self.flat_shards.dtype:
            mine = copy_kernels.cast(mine, self.flat_shards.dtype)  # back to the masters' dtype for the step
        return [
            mine[offset : offset + size].reshape(tuple(shard.shape))
            for offset, size, shard in zip(self.offsets, self.sizes, self.shards, strict=True)
        ]

    @contextlib.contextmanager
    def holding(self, full: list[Tensor]) -> Iterator[None]:
        """The layer's parameters are ``full`` inside, its shards again after."""
        for name, tensor in zip(self.names, full, strict=True):
            self.module._parameters[name] = tensor
        try:
            yield
        finally:
            for name, shard in zip(self.names, self.shards, strict=True):
                self.module._parameters[name] = shard


class ShardedForward(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, unit: Unit, layer_forward: Any, *shards: Any) -> Any:
        if unit.index == 0:
            unit.schedule.events.clear()  # a new step: keep the events of one step only
        full = [Tensor._from_array(a) for a in unit.gather()]
        unit.schedule.last_ran = unit
        unit.schedule.events.append(("forward", unit.index))
        if unit.next is not None:
            unit.next.prefetch()  # the next layer's parameters travel while this one computes
        if not unit.reshard_after_forward and any(ctx.needs_input_grad):
            # Kept: the graph is recorded now, with the whole parameters as its leaves, and saved on this node
            # until its backward (or until the graph is dropped): backward needs neither a gather nor a recompute.
            full = [Tensor._from_array(t.data, requires_grad=True) for t in full]
            x_in = Tensor._from_array(x, requires_grad=ctx.needs_input_grad[0])
            with enable_grad(), unit.holding(full):
                y = layer_forward(x_in)
            ctx.save_for_backward(x_in, y, *full)
        else:  # the whole parameters are let go now: backward gathers them again
            with no_grad(), unit.holding(full):
                y = layer_forward(Tensor._from_array(x))
            ctx.save_for_backward(x)
        ctx.unit, ctx.layer_forward = unit, layer_forward
        return y.data

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        saved, unit = ctx.saved_tensors, ctx.unit
        if len(saved) > 1:  # kept since forward, graph and all
            x_in, y, *full = saved
        else:
            full = [Tensor._from_array(a, requires_grad=True) for a in unit.gather()]
        unit.schedule.last_ran = unit
        unit.schedule.events.append(("backward", unit.index))
        if len(saved) == 1:
            if unit.previous is not None:
                unit.previous.prefetch()  # backward visits the layers in reverse
            x_in = Tensor._from_array(saved[0], requires_grad=ctx.needs_input_grad[0])
            with enable_grad(), unit.holding(full):
                y = ctx.layer_forward(x_in)  # recomputed, this time recorded
        backward([y], [Tensor._from_array(dy)])
        shard_grads = unit.reduce_scatter([None if t.grad is None else t.grad.data for t in full])
        dx = x_in.grad.data if x_in.grad is not None else None
        return (dx, None, None, *shard_grads)


def fully_shard(
    module: Module,
    comm: Communicator,
    reshard_after_forward: bool = True,
    mixed_precision: MixedPrecision | None = None,
) -> Module:
    """Shard every parameter of ``module`` along dim 0 over ``comm``, one unit per layer that owns parameters.

    Returns ``module``, whose ``parameters()`` are now this rank's shards and whose ``state_dict()`` is
    :func:`sharded_state_dict`. With ``reshard_after_forward=False`` each unit keeps the parameters it gathered in
    forward until its backward, which then gathers nothing; ``mixed_precision`` is FSDP's policy (both in the
    module docstring).

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import fully_shard
    >>> comm = nbcoll.init()                      # one rank here; under mpiexec -n 4, a quarter of each layer
    >>> model = fully_shard(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), comm)
    >>> optimizer = nbcoll.optim.SGD(model.parameters(), lr=0.1)    # built after fully_shard: over the shards
    >>> model(nbcoll.tensor([[1.0, 2.0, 3.0, 4.0]])).sum().backward()
    >>> optimizer.step()
    >>> [p.shape for p in model.parameters()]
    [(8, 4), (8,), (2, 8), (2,)]
    >>> comm.destroy()
    """
    if not isinstance(module, Module):
        raise TypeError(f"module: expected an nbcoll.nn.Module, got {type(module).__name__}")
    if not isinstance(reshard_after_forward, bool):
        raise TypeError(f"reshard_after_forward: expected True or False, got {reshard_after_forward!r}")
    if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecision):
        raise TypeError(f"mixed_precision: expected a MixedPrecision or None, got {type(mixed_precision).__name__}")
    for name, layer in module.named_modules():
        if getattr(layer, "_fully_sharded", None) is not None:
            raise RuntimeError(f"module: {name or type(layer).__name__!r} is already sharded by fully_shard")
    check_same_parameters(comm, list(module.named_parameters()), "fully_shard")
    schedule, units = Schedule(), []
    for _, layer in list(module.named_modules()):
        if not any(p is not None for p in layer._parameters.values()):
            continue
        unit = Unit(layer, comm, len(units), schedule, reshard_after_forward, mixed_precision)
        _cast_buffers(layer, mixed_precision)
        if units:
            unit.previous, units[-1].next = units[-1], unit
        units.append(unit)
        layer_forward = layer.forward

        def sharded_forward(x: Tensor, unit: Unit = unit, layer_forward: Any = layer_forward) -> Tensor:
            if not isinstance(x, Tensor):
                raise TypeError(f"x: a fully sharded layer takes one Tensor, got {type(x).__name__}")
            if x.dtype.kind == "f" and x.dtype != unit.param_dtype:
                x = x.astype(unit.param_dtype)  # recorded: the input's gradient goes back in its own dtype
            return ShardedForward.apply(x, unit, layer_forward, *unit.shards)

        object.__setattr__(layer, "forward", sharded_forward)
        object.__setattr__(layer, "_fully_sharded", unit)
    object.__setattr__(module, "fully_shard_schedule", schedule)

    def state_dict(keep_vars: bool = False) -> dict[str, Any]:
        return Module.state_dict(module, keep_vars=True) if keep_vars else sharded_state_dict(module)

    object.__setattr__(module, "state_dict", state_dict)  # shards and offsets; the Tensors with keep_vars
    return module


def _cast_buffers(layer: Module, policy: MixedPrecision | None) -> None:
    """The layer's own floating buffers in the policy's ``buffer_dtype`` (running statistics and the like)."""
    dtype = None if policy is None else policy.buffer_dtype
    for name, buffer in list(layer._buffers.items()):
        if dtype is not None and buffer is not None and buffer.dtype.kind == "f" and buffer.dtype != dtype:
            layer._buffers[name] = buffer.astype(dtype)


__all__ = ["ShardedAway", "ShardedForward", "Unit", "fully_shard"]
