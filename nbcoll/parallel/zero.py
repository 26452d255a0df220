"""``ZeroRedundancyOptimizer``: each rank keeps the optimizer state (stage 1) and the gradient (stage 2) of one shard.

With plain data parallelism every rank runs the same optimizer step on the same averaged gradient, so every rank
holds the same optimizer state: with Adam, 8 bytes per float32 parameter, twice the model. ZeRO splits the work:
the parameters are laid out side by side in one flat buffer, padded to ``comm.size`` equal shards, and rank ``r``
updates only shard ``r``, then the ranks all-gather the updated shards::

    flat = [ p_0 | p_1 | ... | padding ]            every parameter's data is a view of it
    shard r = flat[r * S : (r + 1) * S]             S = ceil(total / ranks)
    stage 1:  grad_shard = (averaged .grad, from DistributedDataParallel)[shard r]
    stage 2:  grad_shard = reduce_scatter([ .grad of every parameter | 0 ], op="avg")   then .grad = None
    inner optimizer steps on shard r only (its state has S elements, not total)
    all_gather(shard r -> flat)                     every rank's parameters are whole again

The update rules of SGD, Adam and AdamW are elementwise, so updating a flat shard is exactly updating each
parameter; padding stays zero (its gradient is zero). Here stage 2 reduce-scatters in ``step()``, after backward,
so the full local gradients live until then; each rank keeps only its gradient shard afterwards.

Example::

    model = DistributedDataParallel(MLP(), comm)                  # stage 1: under DDP
    optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.Adam, comm, stage=1, lr=1e-3)

    model = MLP()                                                 # stage 2: an unwrapped module
    optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.Adam, comm, stage=2, lr=1e-3)
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()                                          # reduce-scatter, update, all-gather

``mixed_precision=MixedPrecision(param_dtype, reduce_dtype)`` is FSDP's policy applied to ZeRO (as mixed-precision
ZeRO keeps it): the flat buffer above holds the float32 masters, of which each rank steps its shard; the model's
parameters become views of a second flat buffer in ``param_dtype``, so forward and backward run in it (give the
model inputs in it). The gradients are cast to ``reduce_dtype`` (``param_dtype`` when None) for the reduction and
back to the masters' dtype before the step, and the updated master shard is cast to ``param_dtype`` before the
all-gather. The masters outside this rank's shard are not kept current; ``MixedPrecision()`` changes nothing::

    flat (float32 masters)  --step shard r, cast-->  model_flat[shard r] (param_dtype)  --all_gather-->  model_flat

Checkpoints follow PyTorch: ``consolidate_state_dict(to=0)`` (on every rank) gathers the shards' optimizer state to
rank 0, where ``state_dict()`` gives it as a plain optimizer over the same parameters would have it (one group,
the state cut back into each parameter's shape); ``load_state_dict`` takes such a dict on every rank, from a ZeRO
run on any rank count or from a plain optimizer, and keeps this rank's shard of it::

    optimizer.consolidate_state_dict(to=0)
    if comm.rank == 0:
        nbcoll.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.npz")
    ...
    optimizer.load_state_dict(nbcoll.load("ckpt.npz")["optimizer"])           # on every rank
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.nn import Parameter
from nbcoll.parallel.data_parallel import check_same_parameters
from nbcoll.parallel.mixed_precision import MixedPrecision
from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


class ZeroRedundancyOptimizer:
    """An optimizer of ``optimizer_class`` over this rank's shard of ``params``; ``stage`` 1 or 2.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import ZeroRedundancyOptimizer
        >>> comm = nbcoll.init()                      # one rank here: it owns the whole shard
        >>> model = nn.Linear(3, 2)
        >>> optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.SGD, comm, stage=2, lr=0.1)
        >>> optimizer.shard_range                    # the elements of the flat parameters this rank updates
        (0, 8)
        >>> comm.destroy()
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        optimizer_class: type,
        comm: Communicator,
        stage: int = 1,
        mixed_precision: MixedPrecision | None = None,
        **opt_kwargs: Any,
    ) -> None:
        if stage not in (1, 2):
            raise ValueError(f"stage: expected 1 (optimizer state sharded) or 2 (and gradients), got {stage!r}")
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecision):
            raise TypeError(f"mixed_precision: expected a MixedPrecision or None, got {type(mixed_precision).__name__}")
        self.params = _check_params(params)
        self.comm, self.stage = comm, stage
        check_same_parameters(comm, [(f"params[{i}]", p) for i, p in enumerate(self.params)], "ZeroRedundancyOptimizer")
        dtype = self.params[0].dtype
        self.offsets, total = [], 0
        for p in self.params:
            self.offsets.append(total)
            total += p.size
        self.total = total
        self.shard_size = -(-total // comm.size)  # ceil: the last shards carry the padding
        self.flat = memory.zeros(self.shard_size * comm.size, dtype)
        copy_kernels.flatten([copy_kernels.contiguous(p.data) for p in self.params], out=self.flat[:total])
        comm.broadcast(self.flat, root=0)  # the replicas start equal, wrapped by DDP or not
        policy = mixed_precision or MixedPrecision()
        self.param_dtype = policy.param_dtype or dtype  # what the model computes in
        self.reduce_dtype = policy.reduce_dtype or self.param_dtype  # what the gradients are averaged in
        # The model's parameters: the masters themselves, or their copy in param_dtype.
        self.model_flat = self.flat if self.param_dtype == dtype else copy_kernels.cast(self.flat, self.param_dtype)
        for p, offset in zip(self.params, self.offsets, strict=True):
            view = self.model_flat[offset : offset + p.size].reshape(p.shape)  # the parameter lives in the buffer
            if p.dtype == view.dtype:
                p.data = view
            else:  # .data refuses a new dtype; a cast in place is the exception, as in Module.to
                p._data = memory.track(view)
        start = comm.rank * self.shard_size
        self.shard_range = (start, start + self.shard_size)
        self.shard = Parameter(Tensor._from_array(self.flat[start : start + self.shard_size]))
        # Stage 2 keeps its averaged gradient shard between steps; stage 1 needs one only during step().
        self.grad_shard = memory.zeros(self.shard_size, dtype) if stage == 2 else None
        self.optimizer = optimizer_class([self.shard], **opt_kwargs)
        self._consolidated: dict[str, Any] | None = None  # on the rank consolidate_state_dict gathered to

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The inner optimizer's groups (one, holding the shard): learning-rate schedulers adjust these.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import ZeroRedundancyOptimizer
        >>> comm = nbcoll.init()
        >>> optimizer = ZeroRedundancyOptimizer(nn.Linear(3, 2).parameters(), nbcoll.optim.SGD, comm, lr=0.1)
        >>> optimizer.param_groups[0]["lr"] = 0.05          # the next step uses the new rate
        >>> optimizer.param_groups[0]["lr"]
        0.05
        >>> comm.destroy()
        """
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients of every parameter (and of the shard).

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import ZeroRedundancyOptimizer
        >>> comm = nbcoll.init()
        >>> model = nn.Linear(3, 2)
        >>> optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.SGD, comm, lr=0.1)
        >>> model(nbcoll.tensor([[1.0, 2.0, 3.0]])).sum().backward()
        >>> optimizer.zero_grad()
        >>> print(model.weight.grad)
        None
        >>> comm.destroy()
        """
        for p in self.params:
            p.grad = None
        self.shard.grad = None

    def step(self) -> None:
        """Gather this rank's gradient shard, update the shard, and all-gather the parameters.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import ZeroRedundancyOptimizer
        >>> comm = nbcoll.init()
        >>> model = nn.Linear(2, 1, bias=False)
        >>> _ = nn.init.ones_(model.weight)
        >>> optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.SGD, comm, lr=0.5)
        >>> model(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
        >>> optimizer.step()                         # w -= 0.5 * [1, 2], then every rank gets the new weights
        >>> model.weight.numpy()
        array([[0.5, 0. ]], dtype=float32)
        >>> comm.destroy()
        """
        if self.stage == 1:
            grad_shard = self._copy_own_gradients()
        else:
            grad_shard = self._reduce_scatter_gradients()
        self.shard.grad = Tensor._from_array(grad_shard)
        self._consolidated = None  # it would describe the state before this step
        self.optimizer.step()
        if self.stage == 1:
            self.shard.grad = None  # the full gradients stay with DDP's buckets; the shard's copy is not kept
        start, stop = self.shard_range
        if self.model_flat is not self.flat:
            copy_kernels.cast_into(self.model_flat[start:stop], self.flat[start:stop])  # the stepped masters
        self.comm.all_gather(self.model_flat[start:stop], self.model_flat)  # in place: this rank's block

    def _copy_own_gradients(self) -> Any:
        """Stage 1: the gradients are already averaged (by DDP); copy the part of them that falls in the shard."""
        start, stop = self.shard_range
        grad_shard = memory.zeros(self.shard_size, self.flat.dtype)
        for p, offset in zip(self.params, self.offsets, strict=True):
            lo, hi = max(start, offset), min(stop, offset + p.size)
            if lo >= hi or p.grad is None:
                continue
            grad = copy_kernels.contiguous(p.grad.data).reshape(p.size)
            copy_kernels.cast_into(grad_shard[lo - start : hi - start], grad[lo - offset : hi - offset])
        return grad_shard

    def _reduce_scatter_gradients(self) -> Any:
        """Stage 2: average the raw local gradients over the ranks in ``reduce_dtype``, each rank receiving only
        its shard, in the masters' dtype."""
        flat_grad = memory.zeros(self.flat.size, self.reduce_dtype)
        for p, offset in zip(self.params, self.offsets, strict=True):
            if p.grad is not None:  # cast_into copies when the dtypes are the same
                grad = copy_kernels.contiguous(p.grad.data).reshape(p.size)
                copy_kernels.cast_into(flat_grad[offset : offset + p.size], grad)
            p.grad = None  # from here on this rank holds only its gradient shard
        if self.reduce_dtype == self.flat.dtype:
            self.comm.reduce_scatter(flat_grad, self.grad_shard, op="avg")
        else:
            reduced = memory.empty(self.shard_size, self.reduce_dtype)
            self.comm.reduce_scatter(flat_grad, reduced, op="avg")
            copy_kernels.cast_into(self.grad_shard, reduced)
        return self.grad_shard

    # -- checkpoints -------------------------------------------------------------------------------------------

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collective: gather every rank's shard of the optimizer state to rank ``to``, for :meth:`state_dict`.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import ZeroRedundancyOptimizer
        >>> comm = nbcoll.init()
        >>> model = nn.Linear(2, 1)
        >>> optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.Adam, comm, lr=0.1)
        >>> model(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
        >>> optimizer.step()
        >>> optimizer.consolidate_state_dict(to=0)
        >>> sorted(optimizer.state_dict()["state"][0])     # on rank 0: the weight's state, in the weight's shape
        ['exp_avg', 'exp_avg_sq', 'step']
        >>> comm.destroy()
        """
        if isinstance(to, bool) or not isinstance(to, int | np.integer) or not 0 <= to < self.comm.size:
            raise ValueError(f"to: expected a rank in [0, {self.comm.size}), got {to!r}")
        local = self.optimizer.state_dict()
        here = self.comm.rank == to
        whole: dict[str, Any] = {}
        # Every rank has stepped as often as the others, so each holds the same entries in the same order.
        for name, value in local["state"].get(0, {}).items():
            if isinstance(value, np.ndarray):
                gathered = memory.zeros(self.shard_size * self.comm.size, value.dtype) if here else None
                self.comm.gather(memory.to_device(value), gathered, root=to)
                value = memory.to_host(gathered)[: self.total] if here else None
            whole[name] = value  # numbers (step counts) are the same on every rank
        self._consolidated = None
        if here:
            state = {}
            if whole:  # nothing before the first step, as for a plain optimizer
                for i, (p, offset) in enumerate(zip(self.params, self.offsets, strict=True)):
                    state[i] = {name: _cut(value, offset, p.shape) for name, value in whole.items()}
            settings = {k: v for k, v in local["param_groups"][0].items() if k != "params"}
            groups = [{**settings, "params": list(range(len(self.params)))}]
            self._consolidated = {"state": state, "param_groups": groups}

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state as a plain optimizer over the same parameters has it, on the rank that
        :meth:`consolidate_state_dict` gathered to (until the next :meth:`step`, which makes it out of date).

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import ZeroRedundancyOptimizer
        >>> comm = nbcoll.init()
        >>> model = nn.Linear(3, 2)
        >>> optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.SGD, comm, lr=0.1, momentum=0.9)
        >>> model(nbcoll.tensor([[1.0, 2.0, 3.0]])).sum().backward()
        >>> optimizer.step()
        >>> optimizer.consolidate_state_dict(to=0)
        >>> state = optimizer.state_dict()
        >>> state["state"][0]["momentum_buffer"].shape, state["param_groups"][0]["params"]
        ((2, 3), [0, 1])
        >>> plain = nbcoll.optim.SGD(nn.Linear(3, 2).parameters(), lr=0.1, momentum=0.9)
        >>> plain.load_state_dict(state)                 # the same layout as a plain optimizer's
        >>> comm.destroy()
        """
        if self._consolidated is None:
            raise RuntimeError(
                f"state_dict: rank {self.comm.rank} holds no consolidated state; call "
                f"consolidate_state_dict(to={self.comm.rank}) on every rank first, after the last step()"
            )
        return self._consolidated

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep this rank's shard of a whole optimizer state (from :meth:`state_dict` or a plain optimizer's).

        Call it on every rank with the same dict; the rank count may differ from the one that saved it.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import ZeroRedundancyOptimizer
        >>> comm = nbcoll.init()
        >>> model = nn.Linear(2, 1)
        >>> plain = nbcoll.optim.Adam(model.parameters(), lr=0.1)
        >>> model(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
        >>> plain.step()
        >>> optimizer = ZeroRedundancyOptimizer(model.parameters(), nbcoll.optim.Adam, comm, lr=0.5)
        >>> optimizer.load_state_dict(plain.state_dict())
        >>> optimizer.param_groups[0]["lr"], optimizer.optimizer.state[optimizer.shard]["step"]
        (0.1, 1)
        >>> comm.destroy()
        """
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        if not isinstance(groups, list) or not isinstance(state_dict.get("state"), dict):
            raise ValueError("state_dict: expected a dict with 'state' and 'param_groups', from state_dict()")
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(
                f"state_dict: expected one parameter group of {len(self.params)} parameters (this optimizer's), "
                f"got groups of {sizes}"
            )
        saved = [state_dict["state"].get(int(i)) or {} for i in groups[0]["params"]]
        names = list(dict.fromkeys(name for entry in saved for name in entry))
        shard_state = {name: self._shard_of(saved, name) for name in names}
        settings = {k: v for k, v in groups[0].items() if k != "params"}
        inner = {"state": {0: shard_state} if shard_state else {}, "param_groups": [{**settings, "params": [0]}]}
        self.optimizer.load_state_dict(inner)
        self._consolidated = None

    def _shard_of(self, saved: list[dict[str, Any]], name: str) -> Any:
        """This rank's part of state entry ``name`` of every parameter: a shard of the flat layout, or a number."""
        values = [entry[name] for entry in saved if name in entry]
        if not any(isinstance(v, np.ndarray | Tensor) for v in values):
            if len({repr(v) for v in values}) > 1:  # the shard is one tensor: its parameters step together
                raise ValueError(f"state_dict: state entry {name!r} differs between parameters: {values}")
            return values[0]
        start, stop = self.shard_range
        shard = np.zeros(self.shard_size, self.flat.dtype)  # a parameter without state: zeros, never stepped
        for j, (entry, p, offset) in enumerate(zip(saved, self.params, self.offsets, strict=True)):
            if name not in entry:
                continue
            value = entry[name].numpy() if isinstance(entry[name], Tensor) else np.asarray(entry[name])
            if value.shape != p.shape:
                raise ValueError(f"state_dict: state[{j}][{name!r}]: expected shape {p.shape}, got {value.shape}")
            lo, hi = max(start, offset), min(stop, offset + p.size)
            if lo < hi:
                shard[lo - start : hi - start] = value.reshape(p.size)[lo - offset : hi - offset]
        return shard

    def __repr__(self) -> str:
        start, stop = self.shard_range
        return (
            f"ZeroRedundancyOptimizer(stage={self.stage}, rank {self.comm.rank} of {self.comm.size} updates "
            f"[{start}, {stop}) of {self.total} elements, {self.optimizer!r})"
        )


def _cut(value: Any, offset: int, shape: tuple[int, ...]) -> Any:
    """One parameter's part of a flat state array, in the parameter's shape; numbers stay as they are."""
    if not isinstance(value, np.ndarray):
        return value
    size = int(np.prod(shape, dtype=np.int64))
    return value[offset : offset + size].reshape(shape).copy()


def _check_params(params: Iterable[Tensor]) -> list[Tensor]:
    if isinstance(params, Tensor):
        raise TypeError("params: expected an iterable of parameters, got one Tensor")
    params = list(params)
    if not params:
        raise ValueError("params: ZeroRedundancyOptimizer got an empty parameter list; pass model.parameters()")
    for i, p in enumerate(params):
        if not isinstance(p, Tensor) or not p.requires_grad or not p.is_leaf:
            raise TypeError(f"params[{i}]: expected a leaf Tensor that requires grad (a parameter), got {p!r}")
        if p.dtype != params[0].dtype:
            raise TypeError(f"params[{i}]: every parameter must have one dtype ({params[0].dtype}), got {p.dtype}")
    if len({id(p) for p in params}) != len(params):
        raise ValueError("params: a parameter appears more than once")
    return params


__all__ = ["ZeroRedundancyOptimizer"]
