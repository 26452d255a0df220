"""PowerSGD (Vogels et al. 2019): each gradient matrix averaged as a rank-r product, PyTorch's ``powerSGD_hook``.

A gradient reshaped to an ``n x m`` matrix ``M`` (``n`` the first dimension) costs ``n*m`` numbers on the wire. One
step of power iteration finds ``P`` (``n x r``) and ``Q`` (``m x r``) with ``M ~ P Q^T``, and only they travel::

    M = M + error                                   error feedback: what earlier steps left out is sent later
    P = M Q                                         Q: last step's (warm start), or random at first
    P = all_reduce(P, sum);  P = orthonormal columns of P (Gram-Schmidt)
    Q = M^T P
    Q = all_reduce(Q, avg)
    M' = P Q^T                                      the averaged gradient, rank r
    error = M - M'

So a bucket sends ``r * (n + m)`` numbers per matrix instead of ``n * m``. A tensor that would not shrink by
``min_compression_rate`` (biases and other vectors, whose matrix is ``n x 1``) is averaged uncompressed, all such
tensors of a bucket in one all-reduce. Before ``start_powerSGD_iter`` backward passes, every bucket is averaged
uncompressed (PyTorch's recipe: train a while at full precision, then compress).

Unlike PyTorch, the error is kept for the compressed matrices only: the error of an exactly averaged tensor,
``local - mean``, averages to zero over the ranks, so the averaged gradients are the same.

Example::

    state = PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=10)
    model.register_comm_hook(state, powerSGD_hook)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.parallel.comm_hooks import allreduce_hook, hook_comm
from nbcoll.tensors import Tensor, no_grad

if TYPE_CHECKING:
    from nbcoll.parallel.buckets import Bucket


class PowerSGDState:
    """What PowerSGD remembers between steps: the iteration count, each bucket's Q and error.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import DistributedDataParallel, PowerSGDState, powerSGD_hook
    >>> comm = nbcoll.init()
    >>> model = DistributedDataParallel(nn.Linear(8, 8), comm)
    >>> state = PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=0)
    >>> model.register_comm_hook(state, powerSGD_hook)
    >>> model(nbcoll.tensor([[1.0] * 8] * 2)).sum().backward()
    >>> state.iter, state.compression_stats()       # the 8x8 weight sent as 8 + 8 numbers, the bias whole
    (1, (3.0, 72, 24))
    >>> comm.destroy()

    ``process_group`` is the communicator to reduce over (None: the bucket's). The random first ``Q`` comes from
    ``random_seed``, the same on every rank. ``orthogonalization_epsilon`` is added to each column's norm
    before dividing by it.
    """

    def __init__(
        self,
        process_group: Any = None,
        matrix_approximation_rank: int = 1,
        start_powerSGD_iter: int = 1_000,  # noqa: N803 - PyTorch's name
        min_compression_rate: float = 2,
        use_error_feedback: bool = True,
        warm_start: bool = True,
        orthogonalization_epsilon: float = 0.0,
        random_seed: int = 0,
    ) -> None:
        if not isinstance(matrix_approximation_rank, int) or matrix_approximation_rank < 1:
            raise ValueError(f"matrix_approximation_rank: expected an integer >= 1, got {matrix_approximation_rank!r}")
        if not isinstance(start_powerSGD_iter, int) or start_powerSGD_iter < 0:
            raise ValueError(f"start_powerSGD_iter: expected an integer >= 0, got {start_powerSGD_iter!r}")
        if not min_compression_rate >= 1:
            raise ValueError(f"min_compression_rate: must be >= 1, got {min_compression_rate}")
        if not orthogonalization_epsilon >= 0:
            raise ValueError(f"orthogonalization_epsilon: must be >= 0, got {orthogonalization_epsilon}")
        self.process_group = process_group
        self.matrix_approximation_rank = matrix_approximation_rank
        self.start_powerSGD_iter = start_powerSGD_iter
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback = use_error_feedback
        self.warm_start = warm_start
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.rng = np.random.RandomState(random_seed)
        self.iter = 0
        self.error_dict: dict[int, list[Any]] = {}  # bucket index -> one error array per compressed matrix
        self.q_memory_dict: dict[int, list[Any]] = {}  # bucket index -> one Q per compressed matrix
        self.total_numel_before_compression = 0
        self.total_numel_after_compression = 0

    def maybe_increase_iter(self, bucket: Bucket) -> None:
        """Count one backward pass when the last bucket of a pass is reduced.

        >>> from nbcoll.parallel import PowerSGDState
        >>> from nbcoll.parallel.buckets import Bucket
        >>> state = PowerSGDState()
        >>> state.maybe_increase_iter(Bucket(0, [], [], [], None, last=True)); state.iter
        1
        """
        if bucket.is_last():
            self.iter += 1

    def compression_stats(self) -> tuple[float, int, int]:
        """``(rate, numbers before, numbers after)`` over every compressed step so far (PyTorch's method).

        >>> from nbcoll.parallel import PowerSGDState
        >>> PowerSGDState().compression_stats()       # nothing compressed yet
        (0.0, 0, 0)
        """
        before, after = self.total_numel_before_compression, self.total_numel_after_compression
        return (before / after if after else 0.0), before, after


def should_compress(n: int, m: int, rank: int, min_compression_rate: float) -> bool:
    """Whether ``r * (n + m)`` numbers are at least ``min_compression_rate`` times fewer than ``n * m``."""
    return (n + m) * rank * min_compression_rate < n * m


def orthogonalize(p: Any, epsilon: float = 0.0) -> Any:
    """Gram-Schmidt on the columns of the ``n x r`` array ``p``, in its dtype; a zero column stays zero.

    ``for i: p[:, i] /= norm(p[:, i]) + epsilon; for j > i: p[:, j] -= (p[:, i] . p[:, j]) p[:, i]``.
    ``r`` is a handful of columns: the loop runs on the host, where it reads most plainly.
    """
    cols = memory.to_host(p).copy()
    for i in range(cols.shape[1]):
        norm = np.sqrt(np.sum(cols[:, i] * cols[:, i])) + cols.dtype.type(epsilon)
        if norm > 0:
            cols[:, i] /= norm
        rest = cols[:, i + 1 :]
        rest -= np.sum(cols[:, i : i + 1] * rest, axis=0) * cols[:, i : i + 1]
    return memory.to_device(cols)


def powerSGD_hook(state: PowerSGDState, bucket: Bucket) -> Any:  # noqa: N802 - PyTorch's name
    """Average the bucket's matrices as rank-r products, its vectors exactly (the module docstring's steps).

    Synchronous: the three all-reduces of a bucket (vectors, P, Q) run in turn and the hook returns the bucket's
    averaged buffer, where PyTorch chains three futures.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import DistributedDataParallel, PowerSGDState, powerSGD_hook
    >>> comm = nbcoll.init()
    >>> model = DistributedDataParallel(nn.Linear(16, 16, bias=False), comm)
    >>> state = PowerSGDState(comm, matrix_approximation_rank=2, start_powerSGD_iter=0)
    >>> model.register_comm_hook(state, powerSGD_hook)
    >>> model(nbcoll.tensor([[1.0] * 16])).sum().backward()    # gradient: all ones, of rank 1: nothing is lost
    >>> bool(abs(model.module.weight.grad.numpy() - 1).max() < 1e-5), state.compression_stats()[0]
    (True, 4.0)
    >>> comm.destroy()
    """
    comm = hook_comm(state, bucket)
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(comm, bucket).wait()
    buffer, index = bucket.buffer(), bucket.index
    matrices, vectors = [], []
    for g in bucket.gradients():
        n, m = (g.shape[0], g.size // g.shape[0]) if g.ndim and g.shape[0] else (1, g.size)
        rank = min(n, m, state.matrix_approximation_rank)
        compress = g.size > 0 and should_compress(n, m, rank, state.min_compression_rate)
        state.total_numel_before_compression += g.size
        state.total_numel_after_compression += rank * (n + m) if compress else g.size
        (matrices if compress else vectors).append((g.reshape(n, m), rank) if compress else g)

    if vectors:  # every uncompressed tensor of the bucket in one all-reduce
        flat = copy_kernels.flatten([memory.contiguous_input(v, "gradient") for v in vectors])
        copy_kernels.unflatten(comm.all_reduce(flat, op="avg"), vectors)
    if not matrices:
        state.maybe_increase_iter(bucket)
        return buffer

    with no_grad():
        if state.use_error_feedback and index not in state.error_dict:
            state.error_dict[index] = [memory.zeros(tuple(mat.shape), buffer.dtype) for mat, _ in matrices]
        ms = [Tensor._from_array(mat) for mat, _ in matrices]
        if state.use_error_feedback:
            ms = [mt + Tensor._from_array(e) for mt, e in zip(ms, state.error_dict[index], strict=True)]
        qs = state.q_memory_dict.get(index) if state.warm_start else None
        if qs is None:  # the same random start on every rank: the same generator, drawn in the same order
            qs = [
                orthogonalize(state.rng.standard_normal((mat.shape[1], r)).astype(buffer.dtype)) for mat, r in matrices
            ]

        ps = [(mt @ Tensor._from_array(q)).data for mt, q in zip(ms, qs, strict=True)]
        flat_p = comm.all_reduce(copy_kernels.flatten(ps), op="sum")
        copy_kernels.unflatten(flat_p, ps)
        ps = [orthogonalize(p, state.orthogonalization_epsilon) for p in ps]

        qs = [(mt.T @ Tensor._from_array(p)).data for mt, p in zip(ms, ps, strict=True)]
        flat_q = comm.all_reduce(copy_kernels.flatten(qs), op="avg")
        copy_kernels.unflatten(flat_q, qs)

        for k, ((mat, _), mt, p, q) in enumerate(zip(matrices, ms, ps, qs, strict=True)):
            approx = Tensor._from_array(p) @ Tensor._from_array(q).T
            if state.use_error_feedback:
                state.error_dict[index][k] = (mt - approx).data
            copy_kernels.copy(mat, copy_kernels.contiguous(approx.data))
    if state.warm_start:
        state.q_memory_dict[index] = qs
    state.maybe_increase_iter(bucket)
    return buffer


__all__ = ["PowerSGDState", "orthogonalize", "powerSGD_hook", "should_compress"]
