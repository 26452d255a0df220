"""``DistributedDataParallel``: every rank holds the whole model; gradients are averaged in buckets during backward.

Each rank trains the same model on its own part of the global batch. Averaging the gradients over the ranks gives
every rank the gradient of the mean loss over the global batch, so the replicas take identical steps::

    wrap:      broadcast every parameter and buffer from rank 0        (all replicas start equal)
    backward:  for each parameter, when its gradient is accumulated:
                   copy it into its slot of its bucket's flat buffer
                   if the bucket is complete: all_reduce(bucket, op="avg", async_op=True)
    end:       when the last bucket is launched, wait for all of them; each .grad becomes a view of its bucket

Buckets hold parameters in reverse registration order, because backward produces the gradients of the last
layers first: the first bucket's all-reduce then runs while backward is still computing the earlier layers'
gradients (``events`` records the order). Buckets are launched in index order on every rank, whatever order their
gradients arrive in, because every rank must issue its collectives in the same order.

Example::

    comm = nbcoll.init()
    model = DistributedDataParallel(MLP(), comm, bucket_cap_mb=25)
    optimizer = nbcoll.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:                         # each rank: its own shard of the batch
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()         # returns with every .grad averaged over the ranks
        optimizer.step()

    with model.no_sync():                       # gradient accumulation: no communication ...
        loss_fn(model(x1), y1).backward()
    loss_fn(model(x2), y2).backward()           # ... until the last micro-batch

Two options change how a bucket travels. ``register_comm_hook(state, hook)`` replaces the all-reduce of each bucket
by ``hook(state, bucket)`` (compression: :mod:`nbcoll.parallel.comm_hooks`, :mod:`nbcoll.parallel.powersgd`).
``mixed_precision=MixedPrecision(param_dtype, reduce_dtype, buffer_dtype)`` runs forward and backward on copies of
the parameters cast to ``param_dtype`` (the parameters themselves stay the masters the optimizer updates), fills the
buckets in ``reduce_dtype``, and casts each averaged gradient back to its master's dtype before the step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.nn import Module, Parameter, functional_call
from nbcoll.parallel.buckets import Bucket, assign_buckets, check_hook_result, completed, wait_for
from nbcoll.parallel.mixed_precision import MixedPrecision
from nbcoll.tensors import Tensor, is_grad_enabled
from nbcoll.tensors.engine import topological_order

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

MAX_DIMS = 8  # a parameter's shape is sent as a fixed-width row of integers when replicas are compared


class DistributedDataParallel(Module):
    """Data parallelism over ``comm``: replicas start equal and average their gradients bucket by bucket.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import DistributedDataParallel
        >>> comm = nbcoll.init()                      # one rank here; under mpiexec -n 4, four
        >>> nbcoll.manual_seed(0)
        >>> model = DistributedDataParallel(nn.Linear(4, 2), comm, bucket_cap_mb=1)   # parameters broadcast from rank 0
        >>> model(nbcoll.tensor([[1.0, 2.0, 3.0, 4.0]])).sum().backward()     # .grad = the mean over the ranks
        >>> model.module.bias.grad.numpy()
        array([1., 1.], dtype=float32)
        >>> model.events[-1]
        ('synchronized', 1)
        >>> comm.destroy()

    A parameter that requires grad but gets no gradient in a step would leave its bucket waiting forever: it is
    found at the end of forward (it is not in the graph of the output) and named in a ``RuntimeError``, unless
    ``find_unused_parameters=True``, which gives it a zero gradient instead, as PyTorch's option does.

    ``mixed_precision`` (a :class:`~nbcoll.parallel.MixedPrecision`) is PyTorch's DDP option of the same name:
    forward on copies cast to ``param_dtype`` (floating inputs too), buckets in ``reduce_dtype``, gradients cast back
    to the masters' dtype, buffers cast to ``buffer_dtype`` once at wrapping. ``MixedPrecision()`` casts nothing.
    """

    def __init__(
        self,
        module: Module,
        comm: Communicator,
        bucket_cap_mb: float = 25,
        find_unused_parameters: bool = False,
        mixed_precision: MixedPrecision | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"module: expected an nbcoll.nn.Module, got {type(module).__name__}")
        if getattr(module, "_data_parallel", False):
            raise RuntimeError(f"module: this {type(module).__name__} is already wrapped by DistributedDataParallel")
        if not bucket_cap_mb >= 0:
            raise ValueError(f"bucket_cap_mb: must be >= 0, got {bucket_cap_mb}")
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecision):
            raise TypeError(f"mixed_precision: expected a MixedPrecision or None, got {type(mixed_precision).__name__}")
        policy = mixed_precision or MixedPrecision()
        self.module = module
        object.__setattr__(self, "mixed_precision", policy)
        object.__setattr__(self, "_hook", None)  # (state, hook) once register_comm_hook is called
        object.__setattr__(self, "_synchronized_once", False)
        object.__setattr__(self, "comm", comm)
        object.__setattr__(self, "find_unused_parameters", bool(find_unused_parameters))
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        check_same_parameters(comm, named, "DistributedDataParallel")
        _broadcast_from_rank0(comm, [p for _, p in module.named_parameters()] + list(module.buffers()))
        if policy.buffer_dtype is not None:
            for b in module.buffers():
                if np.dtype(b.dtype).kind == "f":  # in place, as Module.to casts (the .data setter keeps dtypes)
                    b._data = copy_kernels.cast(b.data, policy.buffer_dtype)
        buckets = assign_buckets(named, int(bucket_cap_mb * 2**20), policy.reduce_dtype)
        object.__setattr__(self, "buckets", buckets)
        where = {}
        for bucket in self.buckets:
            bucket.comm = comm
            for k, p in enumerate(bucket.params):
                where[id(p)] = (bucket, k)
        object.__setattr__(self, "_where", where)
        object.__setattr__(self, "_next_launch", 0)  # buckets launch in index order on every rank
        object.__setattr__(self, "_sync", True)
        object.__setattr__(self, "_arrived", 0)  # gradients received in this round
        object.__setattr__(self, "events", [])
        object.__setattr__(module, "_data_parallel", True)
        for name, p in named:
            p.register_post_accumulate_grad_hook(lambda p, name=name: self._on_gradient(name, p))

    # -- forward -------------------------------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        low = self.mixed_precision.param_dtype
        if low is None:
            output = self.module(*args, **kwargs)
        else:  # the casts are in the graph: backward brings each gradient to its master in the master's dtype
            copies = {n: p.astype(low) for n, p in self.module.named_parameters() if np.dtype(p.dtype).kind == "f"}
            args, kwargs = _cast_inputs(args, low), _cast_inputs(kwargs, low)
            output = functional_call(self.module, copies, *args, **kwargs)
        if self._sync and is_grad_enabled():
            self._prepare_for_backward(output)
        return output

    def _prepare_for_backward(self, output: Any) -> None:
        """Start a new round of buckets; name the parameters the output does not depend on."""
        missing = [b.names[k] for b in self.buckets for k in range(len(b.params)) if k not in b.ready]
        if self._arrived and missing:
            raise RuntimeError(
                "DistributedDataParallel: the previous backward left gradient buckets unreduced; these parameters "
                f"got no gradient: {', '.join(missing)} (use them in the loss, or find_unused_parameters=True)"
            )
        for bucket in self.buckets:
            if bucket.work is not None:
                wait_for(bucket.work)  # a bucket of unused parameters launched by a forward that had no backward
            bucket.ready.clear()
            bucket.work = None
        object.__setattr__(self, "_next_launch", 0)
        object.__setattr__(self, "_arrived", 0)
        self.events.clear()
        reached = {id(node) for node in topological_order([t.grad_fn or t for t in _tensors_in(output)])}
        unused = [(b, k) for b in self.buckets for k, p in enumerate(b.params) if id(p) not in reached]
        if unused and not self.find_unused_parameters:
            names = ", ".join(b.names[k] for b, k in unused)
            raise RuntimeError(
                f"DistributedDataParallel: parameters that require grad are not used to compute the output: {names}; "
                "their gradients would never arrive and the all-reduce of their bucket would wait forever. "
                "Use them, set requires_grad=False, or pass find_unused_parameters=True"
            )
        for bucket, k in unused:  # they contribute zeros to the average
            _fill_zero(bucket.slot(k))
            self._mark_ready(bucket, k)

    # -- backward --------------------------------------------------------------------------------------------------

    def _on_gradient(self, name: str, p: Parameter) -> None:
        """Post-accumulate-grad hook: copy the gradient into its bucket; launch the buckets that are complete."""
        if not self._sync:
            return  # no_sync(): the gradient stays in .grad, to be averaged with a later one
        bucket, k = self._where[id(p)]
        if k in bucket.ready:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {name!r} got a second gradient in one round; call forward "
                "again before each backward (or accumulate inside no_sync())"
            )
        self.events.append(("gradient", name))
        object.__setattr__(self, "_arrived", self._arrived + 1)
        for b in self.buckets[: self._next_launch]:  # note the all-reduces that have finished meanwhile
            if completed(b.work) and ("all_reduce done", b.index) not in self.events:
                self.events.append(("all_reduce done", b.index))
        if bucket.flat.dtype == p.grad.dtype:
            copy_kernels.copy(bucket.slot(k), p.grad.data)
        else:  # mixed precision: the bucket is in reduce_dtype
            copy_kernels.cast_into(bucket.slot(k), copy_kernels.contiguous(p.grad.data))
        self._mark_ready(bucket, k)

    def _mark_ready(self, bucket: Bucket, k: int) -> None:
        bucket.ready.add(k)
        while self._next_launch < len(self.buckets):
            nxt = self.buckets[self._next_launch]
            if len(nxt.ready) < len(nxt.params):
                return
            if self._hook is None:
                nxt.work = self.comm.all_reduce(nxt.flat, op="avg", async_op=True)
            else:
                state, hook = self._hook
                nxt.work = hook(state, nxt)
            self.events.append(("all_reduce", nxt.index))
            object.__setattr__(self, "_next_launch", self._next_launch + 1)
        self._finish()

    def _finish(self) -> None:
        """Every bucket is launched: wait for them, then let each .grad be a view of its slot (no copy back)."""
        for bucket in self.buckets:
            reduced = wait_for(bucket.work)
            if reduced is not bucket.flat:  # a hook that returned a new array: its values become the gradients
                check_hook_result(reduced, bucket)
                copy_kernels.copy(bucket.flat, reduced)
            for k, p in enumerate(bucket.params):
                slot = bucket.slot(k)
                p.grad = Tensor._from_array(slot if slot.dtype == p.dtype else copy_kernels.cast(slot, p.dtype))
        self.events.append(("synchronized", len(self.buckets)))
        object.__setattr__(self, "_synchronized_once", True)

    # -- communication hooks -------------------------------------------------------------------------------------

    def register_comm_hook(self, state: Any, hook: Callable[[Any, Bucket], Any]) -> None:
        """Reduce every bucket with ``hook(state, bucket)`` instead of the default average (PyTorch's method).

        The hook gets the :class:`Bucket` (``bucket.buffer()`` is its flat gradient, ``bucket.comm`` the
        communicator, ``bucket.gradients()`` and ``bucket.parameters()`` its parts) and returns the reduced flat
        gradient. Where PyTorch's hook returns a ``torch.futures.Future``, ours returns either the array itself
        (a synchronous hook) or a handle with ``wait()`` that gives it, such as the ``Work`` of an
        ``all_reduce(..., async_op=True)``: buckets are launched as they fill and waited for at the end of
        backward, so an asynchronous hook overlaps backward as the default does. Register once, before the
        first backward.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import DistributedDataParallel, fp16_compress_hook
        >>> comm = nbcoll.init()
        >>> model = DistributedDataParallel(nn.Linear(2, 1), comm)
        >>> model.register_comm_hook(None, fp16_compress_hook)     # state None: the bucket's communicator
        >>> model(nbcoll.tensor([[0.1, 1.0]])).sum().backward()
        >>> model.module.weight.grad.numpy()                       # averaged in float16: 0.1 rounded
        array([[0.09997559, 1.        ]], dtype=float32)
        >>> comm.destroy()
        """
        if not callable(hook):
            raise TypeError(f"hook: expected a callable hook(state, bucket), got {type(hook).__name__}")
        if self._hook is not None:
            raise RuntimeError("register_comm_hook: a communication hook is already registered; register only once")
        if self._arrived or self._synchronized_once:
            raise RuntimeError("register_comm_hook: register the hook before the first backward")
        object.__setattr__(self, "_hook", (state, hook))

    # -- gradient accumulation ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside, backward only accumulates into ``.grad``; the next backward outside averages the sum.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import DistributedDataParallel
        >>> comm = nbcoll.init()
        >>> model = DistributedDataParallel(nn.Linear(2, 1), comm)
        >>> x = nbcoll.tensor([[1.0, 1.0]])
        >>> with model.no_sync():
        ...     model(x).sum().backward()        # accumulated locally, no all-reduce
        >>> model(x).sum().backward()            # averages the sum of both steps
        >>> model.module.bias.grad.numpy()
        array([2.], dtype=float32)
        >>> comm.destroy()
        """
        previous = self._sync
        object.__setattr__(self, "_sync", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_sync", previous)

    def extra_repr(self) -> str:
        sizes = ", ".join(str(len(b.params)) for b in self.buckets)
        return f"ranks={self.comm.size}, buckets of [{sizes}] parameters"


# -- helpers -----------------------------------------------------------------------------------------------------


def _tensors_in(output: Any) -> list[Tensor]:
    """The Tensors that require grad in a forward's output (a Tensor, or lists, tuples and dicts of them)."""
    if isinstance(output, Tensor):
        return [output] if output.requires_grad else []
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in _tensors_in(item)]
    return []


def _cast_inputs(value: Any, dtype: np.dtype) -> Any:
    """Floating Tensors (in tuples, lists and dicts) cast to ``dtype``, as DDP's mixed precision casts inputs."""
    if isinstance(value, Tensor):
        return value.astype(dtype) if np.dtype(value.dtype).kind == "f" and value.dtype != dtype else value
    if isinstance(value, dict):
        return {k: _cast_inputs(v, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_inputs(v, dtype) for v in value)
    return value


def _fill_zero(array: Any) -> None:
    copy_kernels.copy(array, memory.zeros(tuple(array.shape), array.dtype))


def _broadcast_from_rank0(comm: Communicator, tensors: list[Tensor]) -> None:
    for t in tensors:
        if not memory.is_contiguous(t.data):
            t.data = copy_kernels.strided_copy(t.data)
        comm.broadcast(t.data, root=0)


def check_same_parameters(comm: Communicator, named: list[tuple[str, Any]], who: str) -> None:
    """Collective: every rank must hold the same parameters, in the same order, of the same shapes and dtypes.

    Otherwise every rank raises, naming the first parameter that differs and the rank it differs on (``who`` is
    the wrapper that asks), before any collective of mismatched sizes could wait forever.
    """
    rows = np.zeros((len(named), MAX_DIMS + 2), np.int64)
    for i, (name, p) in enumerate(named):
        if p.ndim > MAX_DIMS:
            raise ValueError(f"module: parameter {name!r} has {p.ndim} dimensions; at most {MAX_DIMS} are supported")
        rows[i, : p.ndim] = p.shape
        rows[i, MAX_DIMS] = p.ndim
        rows[i, MAX_DIMS + 1] = ord(p.dtype.char)
    counts = memory.zeros(comm.size, np.int64)
    comm.all_gather(memory.to_device(np.array([len(named)], np.int64)), counts)
    counts = memory.to_host(counts)
    if len(set(counts.tolist())) != 1:
        raise RuntimeError(
            f"{who}: the ranks' modules have different numbers of parameters: {counts.tolist()} "
            f"(rank {comm.rank} has {len(named)})"
        )
    table = memory.zeros(comm.size * rows.size, np.int64)
    comm.all_gather(memory.to_device(rows.reshape(-1)), table)
    tables = memory.to_host(table).reshape(comm.size, *rows.shape)
    for r in range(comm.size):
        for i in np.flatnonzero(np.any(tables[r] != rows, axis=1)):
            name, p = named[i]
            theirs = tuple(int(d) for d in tables[r, i, : tables[r, i, MAX_DIMS]])
            raise RuntimeError(
                f"{who}: parameter {name!r} differs across ranks: shape {p.shape} dtype {p.dtype} "
                f"on rank {comm.rank}, shape {theirs} dtype {np.dtype(chr(tables[r, i, -1]))} "
                f"on rank {r}"
            )


__all__ = ["DistributedDataParallel", "check_same_parameters"]  # Bucket lives in nbcoll.parallel.buckets
