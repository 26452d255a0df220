"""Differentiable collectives: each one's backward is its dual collective.

A collective moves or adds values between ranks, so the gradient of every rank's input collects the output
gradients of every rank it reached. The rule, for the sum of all ranks' losses ``L = sum_r L_r``::

    forward                                  backward (dual)
    all_reduce      y_r = sum_s x_s          dx_r = sum_s dy_s                  all_reduce
    broadcast       y_r = x_root             dx_root = sum_s dy_s, others 0     reduce to root
    reduce          y_root = sum_s x_s       dx_r = dy_root                     broadcast from root
    all_gather      y_r[s] = x_s             dx_r = sum_s dy_s[r]               reduce_scatter
    reduce_scatter  y_r = sum_s x_s[r]       dx_s[r] = dy_r                     all_gather
    scatter         y_r = x_root[r]          dx_root[r] = dy_r, others 0        gather to root
    gather          y_root[s] = x_s          dx_r = dy_root[r]                  scatter from root
    all_to_all      y_r[s] = x_s[r]          dx_s[r] = dy_r[s]                  all_to_all

``[r]`` is the r-th of ``comm.size`` equal blocks along dim 0. ``op="avg"`` (where a sum is taken) divides both
ways by the rank count. Off the root, ``reduce`` and ``gather`` return zeros, which carry no gradient.

Every rank must run the same collectives in the same order, backward included: call the function with an input
that requires grad on every rank, and let every rank's loss depend on its output (``backward`` only visits the
nodes its loss reaches; a rank that skips one leaves its peers waiting until ``NBCOLL_TIMEOUT``).

Example::

    import nbcoll
    from nbcoll.parallel import functional as F

    comm = nbcoll.init()
    x = nbcoll.tensor(np.ones((2, 3)), requires_grad=True)
    y = F.all_gather(x, comm)                  # shape (2 * comm.size, 3) on every rank
    y.sum().backward()                         # x.grad == comm.size everywhere (a reduce-scatter of ones)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.kernels import elementwise
from nbcoll.tensors import Tensor
from nbcoll.tensors.arrays import scalar
from nbcoll.tensors.function import Context, Function

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

LINEAR_OPS = ("sum", "avg")
"""The reductions with a gradient: ``max``, ``min`` and ``prod`` are not linear in each rank's input."""


def _linear_op(op: Any) -> str:
    if op not in LINEAR_OPS:
        raise ValueError(f"op: a differentiable collective reduces with one of {', '.join(LINEAR_OPS)}, got {op!r}")
    return op


def _blocks_shape(shape: tuple[int, ...], comm: Communicator, arg: str) -> tuple[int, ...]:
    """The shape of one rank's block of an array split into ``comm.size`` equal blocks along dim 0."""
    if not shape or shape[0] % comm.size:
        raise ValueError(
            f"{arg}: dim 0 must split into {comm.size} equal blocks (one per rank), got shape {tuple(shape)}"
        )
    return (shape[0] // comm.size,) + tuple(shape[1:])


def _stacked_shape(shape: tuple[int, ...], comm: Communicator, arg: str) -> tuple[int, ...]:
    """The shape of ``comm.size`` blocks of ``shape`` stacked along dim 0."""
    if not shape:
        raise ValueError(f"{arg}: needs at least one dimension to stack the ranks' blocks along, got a 0-d tensor")
    return (shape[0] * comm.size,) + tuple(shape[1:])


def _zeros_like(x: Any) -> Any:
    return memory.zeros(tuple(x.shape), x.dtype)


def _scale(x: Any, factor: float) -> Any:
    return elementwise.binary("mul", x, scalar(factor, x.dtype))


# -- the collective primitives on device arrays, each returning a new array -----------------------------------


def _all_reduce(comm: Communicator, x: Any, op: str) -> Any:
    y = memory.empty(tuple(x.shape), x.dtype)
    comm.all_reduce(copy_kernels.contiguous(x), y, op=op)
    return y


def _broadcast(comm: Communicator, x: Any, root: int) -> Any:
    y = memory.empty(tuple(x.shape), x.dtype)
    comm.broadcast(copy_kernels.contiguous(x), y, root=root)
    return y


def _reduce(comm: Communicator, x: Any, op: str, root: int) -> Any:
    y = _zeros_like(x)  # stays zero off the root
    comm.reduce(copy_kernels.contiguous(x), y, op=op, root=root)
    return y


def _all_gather(comm: Communicator, x: Any) -> Any:
    y = memory.empty(_stacked_shape(tuple(x.shape), comm, "x"), x.dtype)
    comm.all_gather(copy_kernels.contiguous(x), y)
    return y


def _reduce_scatter(comm: Communicator, x: Any, op: str) -> Any:
    y = memory.empty(_blocks_shape(tuple(x.shape), comm, "x"), x.dtype)
    comm.reduce_scatter(copy_kernels.contiguous(x), y, op=op)
    return y


def _scatter(comm: Communicator, x: Any, root: int) -> Any:
    y = memory.empty(_blocks_shape(tuple(x.shape), comm, "x"), x.dtype)
    comm.scatter(copy_kernels.contiguous(x) if comm.rank == root else None, y, root=root)
    return y


def _gather(comm: Communicator, x: Any, root: int) -> Any:
    y = memory.zeros(_stacked_shape(tuple(x.shape), comm, "x"), x.dtype)  # stays zero off the root
    comm.gather(copy_kernels.contiguous(x), y if comm.rank == root else None, root=root)
    return y


def _all_to_all(comm: Communicator, x: Any) -> Any:
    _blocks_shape(tuple(x.shape), comm, "x")
    y = memory.empty(tuple(x.shape), x.dtype)
    comm.all_to_all(copy_kernels.contiguous(x), y)
    return y


# -- autograd Functions: forward and its dual side by side -----------------------------------------------------


class AllReduce(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator, op: str) -> Any:  # y_r = sum_s x_s
        ctx.comm, ctx.op = comm, op
        return _all_reduce(comm, x, op)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_r = sum_s dy_s
        return _all_reduce(ctx.comm, dy, ctx.op), None, None


class Broadcast(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator, root: int) -> Any:  # y_r = x_root
        ctx.comm, ctx.root = comm, root
        return _broadcast(comm, x, root)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_root = sum_s dy_s; the others' x was not read
        dx = _reduce(ctx.comm, dy, "sum", ctx.root)
        return dx, None, None


class Reduce(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator, op: str, root: int) -> Any:  # y_root = sum_s x_s
        ctx.comm, ctx.op, ctx.root = comm, op, root
        return _reduce(comm, x, op, root)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_r = dy_root (/ n for avg)
        dx = _broadcast(ctx.comm, dy, ctx.root)
        if ctx.op == "avg":
            dx = _scale(dx, 1.0 / ctx.comm.size)
        return dx, None, None, None


class AllGather(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator) -> Any:  # y_r[s] = x_s
        ctx.comm = comm
        return _all_gather(comm, x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_r = sum_s dy_s[r]
        return _reduce_scatter(ctx.comm, dy, "sum"), None


class ReduceScatter(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator, op: str) -> Any:  # y_r = sum_s x_s[r]
        ctx.comm, ctx.op = comm, op
        return _reduce_scatter(comm, x, op)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_s[r] = dy_r (/ n for avg)
        dx = _all_gather(ctx.comm, dy)
        if ctx.op == "avg":
            dx = _scale(dx, 1.0 / ctx.comm.size)
        return dx, None, None


class Scatter(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator, root: int) -> Any:  # y_r = x_root[r]
        ctx.comm, ctx.root = comm, root
        return _scatter(comm, x, root)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_root[r] = dy_r; the others' x was not read
        return _gather(ctx.comm, dy, ctx.root), None, None


class Gather(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator, root: int) -> Any:  # y_root[s] = x_s
        ctx.comm, ctx.root = comm, root
        return _gather(comm, x, root)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_r = dy_root[r]
        return _scatter(ctx.comm, dy, ctx.root), None, None


class AllToAll(Function):
    @staticmethod
    def forward(ctx: Context, x: Any, comm: Communicator) -> Any:  # y_r[s] = x_s[r]
        ctx.comm = comm
        return _all_to_all(comm, x)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:  # dx_s[r] = dy_r[s]
        return _all_to_all(ctx.comm, dy), None


# -- the public functions: check once at the entry, then apply -------------------------------------------------


def _tensor(x: Any, comm: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"x: expected an nbcoll Tensor, got {type(x).__name__}")
    if not hasattr(comm, "all_reduce") or not hasattr(comm, "size"):
        raise TypeError(f"comm: expected an nbcoll Communicator, got {type(comm).__name__}")
    return x


def _root(root: Any, comm: Communicator) -> int:
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < comm.size:
        raise ValueError(f"root: expected a rank in [0, {comm.size}), got {root!r}")
    return root


def all_reduce(x: Tensor, comm: Communicator, op: str = "sum") -> Tensor:
    """``y = op over ranks of x`` on every rank; backward all-reduces the gradients the same way.

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()                       # on n ranks each x adds in: y = n * x for equal inputs
    >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
    >>> y = PF.all_reduce(x, comm)
    >>> y.sum().backward()
    >>> y.numpy(), x.grad.numpy()
    (array([1., 2.], dtype=float32), array([1., 1.], dtype=float32))
    >>> comm.destroy()
    """
    return AllReduce.apply(_tensor(x, comm), comm, _linear_op(op))


def broadcast(x: Tensor, comm: Communicator, root: int = 0) -> Tensor:
    """``y = x of root`` on every rank; backward sums every rank's gradient onto the root (zero elsewhere).

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()
    >>> PF.broadcast(nbcoll.tensor([float(comm.rank)]), comm, root=0).numpy()     # rank 0's value everywhere
    array([0.], dtype=float32)
    >>> comm.destroy()
    """
    return Broadcast.apply(_tensor(x, comm), comm, _root(root, comm))


def reduce(x: Tensor, comm: Communicator, op: str = "sum", root: int = 0) -> Tensor:
    """``y = op over ranks of x`` on the root, zeros elsewhere; backward broadcasts the root's gradient.

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()
    >>> PF.reduce(nbcoll.tensor([1.0, 5.0]), comm, op="avg", root=0).numpy()
    array([1., 5.], dtype=float32)
    >>> comm.destroy()
    """
    return Reduce.apply(_tensor(x, comm), comm, _linear_op(op), _root(root, comm))


def all_gather(x: Tensor, comm: Communicator) -> Tensor:
    """Every rank's ``x`` stacked along dim 0 in rank order; backward reduce-scatters the gradient.

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()                       # on n ranks: shape (n * 2, 3)
    >>> PF.all_gather(nbcoll.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), comm).shape
    (2, 3)
    >>> comm.destroy()
    """
    return AllGather.apply(_tensor(x, comm), comm)


def reduce_scatter(x: Tensor, comm: Communicator, op: str = "sum") -> Tensor:
    """Block ``rank`` (of ``comm.size`` along dim 0) of ``op`` over ranks of ``x``; backward all-gathers.

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()                       # x has comm.size blocks along dim 0
    >>> PF.reduce_scatter(nbcoll.tensor([[1.0, 2.0]] * comm.size), comm).numpy()
    array([[1., 2.]], dtype=float32)
    >>> comm.destroy()
    """
    return ReduceScatter.apply(_tensor(x, comm), comm, _linear_op(op))


def scatter(x: Tensor, comm: Communicator, root: int = 0) -> Tensor:
    """Block ``rank`` of the root's ``x``; backward gathers the gradients onto the root (zero elsewhere).

    Every rank passes an ``x`` of the same shape (its values are read on the root only), as the shape of the
    result and the autograd node must exist everywhere.

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()
    >>> PF.scatter(nbcoll.tensor([[7.0, 8.0]] * comm.size), comm, root=0).numpy()   # this rank's block
    array([[7., 8.]], dtype=float32)
    >>> comm.destroy()
    """
    return Scatter.apply(_tensor(x, comm), comm, _root(root, comm))


def gather(x: Tensor, comm: Communicator, root: int = 0) -> Tensor:
    """Every rank's ``x`` stacked along dim 0 on the root, zeros elsewhere; backward scatters the root's gradient.

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()
    >>> PF.gather(nbcoll.tensor([[1.0, 2.0]]), comm, root=0).shape        # (comm.size, 2) on the root
    (1, 2)
    >>> comm.destroy()
    """
    return Gather.apply(_tensor(x, comm), comm, _root(root, comm))


def all_to_all(x: Tensor, comm: Communicator) -> Tensor:
    """Block ``s`` of the result is block ``rank`` of rank ``s``'s ``x``; backward is the same exchange.

    >>> import nbcoll
    >>> from nbcoll.parallel import functional as PF
    >>> comm = nbcoll.init()                       # block s of the result comes from rank s
    >>> PF.all_to_all(nbcoll.tensor([[float(s)] for s in range(comm.size)]), comm).numpy()
    array([[0.]], dtype=float32)
    >>> comm.destroy()
    """
    return AllToAll.apply(_tensor(x, comm), comm)


DUALS = {
    "all_reduce": "all_reduce",
    "broadcast": "reduce",
    "reduce": "broadcast",
    "all_gather": "reduce_scatter",
    "reduce_scatter": "all_gather",
    "scatter": "gather",
    "gather": "scatter",
    "all_to_all": "all_to_all",
}
"""Each differentiable collective and the collective its backward runs."""

__all__ = [
    "DUALS",
    "LINEAR_OPS",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "scatter",
]
