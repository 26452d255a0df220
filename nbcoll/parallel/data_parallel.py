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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.nn import Module, Parameter
from nbcoll.tensors import Tensor, is_grad_enabled
from nbcoll.tensors.engine import topological_order

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

MAX_DIMS = 8  # a parameter's shape is sent as a fixed-width row of integers when replicas are compared


@dataclass
class Bucket:
    """Parameters whose gradients are averaged by one all-reduce of one flat buffer."""

    index: int
    names: list[str]
    params: list[Parameter]
    offsets: list[int]  # where each parameter's gradient starts in ``flat``
    flat: Any  # a 1-D device array: the gradients, side by side
    ready: set[int] = field(default_factory=set)  # positions (in ``params``) whose gradient has arrived
    work: Any = None  # the all-reduce in flight

    def slot(self, k: int) -> Any:
        """The part of ``flat`` that holds parameter ``k``'s gradient, shaped like the parameter."""
        p = self.params[k]
        return self.flat[self.offsets[k] : self.offsets[k] + p.size].reshape(p.shape)


def _assign_buckets(named: list[tuple[str, Parameter]], cap_bytes: int) -> list[Bucket]:
    """Fill buckets in reverse registration order; a bucket closes once it holds ``cap_bytes`` (one dtype each)."""
    buckets: list[Bucket] = []
    open_by_dtype: dict[np.dtype, tuple[list[str], list[Parameter]]] = {}

    def close(dtype: np.dtype) -> None:
        names, params = open_by_dtype.pop(dtype)
        offsets = list(np.cumsum([0] + [p.size for p in params[:-1]]).astype(int))
        flat = memory.zeros(sum(p.size for p in params), dtype)
        buckets.append(Bucket(len(buckets), names, params, offsets, flat))

    for name, p in reversed(named):
        names, params = open_by_dtype.setdefault(p.dtype, ([], []))
        names.append(name)
        params.append(p)
        if sum(q.size for q in params) * p.dtype.itemsize >= cap_bytes:
            close(p.dtype)
    for dtype in list(open_by_dtype):
        close(dtype)
    return buckets


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
    """

    def __init__(
        self, module: Module, comm: Communicator, bucket_cap_mb: float = 25, find_unused_parameters: bool = False
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"module: expected an nbcoll.nn.Module, got {type(module).__name__}")
        if getattr(module, "_data_parallel", False):
            raise RuntimeError(f"module: this {type(module).__name__} is already wrapped by DistributedDataParallel")
        if not bucket_cap_mb >= 0:
            raise ValueError(f"bucket_cap_mb: must be >= 0, got {bucket_cap_mb}")
        self.module = module
        object.__setattr__(self, "comm", comm)
        object.__setattr__(self, "find_unused_parameters", bool(find_unused_parameters))
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        check_same_parameters(comm, named, "DistributedDataParallel")
        _broadcast_from_rank0(comm, [p for _, p in module.named_parameters()] + list(module.buffers()))
        object.__setattr__(self, "buckets", _assign_buckets(named, int(bucket_cap_mb * 2**20)))
        where = {}
        for bucket in self.buckets:
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
        output = self.module(*args, **kwargs)
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
                bucket.work.wait()  # a bucket of unused parameters launched by a forward that had no backward
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
            if b.work.is_completed() and ("all_reduce done", b.index) not in self.events:
                self.events.append(("all_reduce done", b.index))
        copy_kernels.copy(bucket.slot(k), p.grad.data)
        self._mark_ready(bucket, k)

    def _mark_ready(self, bucket: Bucket, k: int) -> None:
        bucket.ready.add(k)
        while self._next_launch < len(self.buckets):
            nxt = self.buckets[self._next_launch]
            if len(nxt.ready) < len(nxt.params):
                return
            nxt.work = self.comm.all_reduce(nxt.flat, op="avg", async_op=True)
            self.events.append(("all_reduce", nxt.index))
            object.__setattr__(self, "_next_launch", self._next_launch + 1)
        self._finish()

    def _finish(self) -> None:
        """Every bucket is launched: wait for them, then let each .grad be a view of its slot (no copy back)."""
        for bucket in self.buckets:
            bucket.work.wait()
            for k, p in enumerate(bucket.params):
                p.grad = Tensor._from_array(bucket.slot(k))
        self.events.append(("synchronized", len(self.buckets)))

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


__all__ = ["Bucket", "DistributedDataParallel", "check_same_parameters"]
