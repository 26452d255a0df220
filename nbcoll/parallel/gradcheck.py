"""Gradcheck across ranks: backward through collectives against central differences of the global loss.

A function of several ranks has one loss, the sum of every rank's weighted output ``L = sum_r sum(v_r * y_r)``.
One backward on every rank gives each rank ``dL/dx_r``; the numerical slope moves one element of one rank's input
while every rank evaluates the function again, and the ranks add their terms with an all-reduce::

    for owner in ranks: for k in elements of x_owner:
        numerical_owner[k] = (L(x_owner + eps e_k) - L(x_owner - eps e_k)) / (2 eps)

Example (under ``mpiexec -n 3``)::

    from nbcoll.parallel import functional as F
    from nbcoll.parallel.gradcheck import gradcheck_ranks

    comm = nbcoll.init()
    x = nbcoll.tensor(np.random.rand(2, 3), dtype=np.float64, requires_grad=True)
    gradcheck_ranks(lambda x: F.all_gather(x, comm) ** 2, [x], comm)   # True on every rank, or AssertionError
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.tensors import Tensor, no_grad, tensor

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


def _local_loss(fn: Callable[..., Tensor], args: Sequence[Any], weights: np.ndarray) -> float:
    with no_grad():
        return float(np.sum(weights * fn(*args).numpy()))


def gradcheck_ranks(
    fn: Callable[..., Tensor],
    inputs: Sequence[Tensor],
    comm: Communicator,
    eps: float = 1e-6,
    atol: float = 1e-7,
    rtol: float = 1e-5,
    seed: int = 0,
) -> bool:
    """Collective: True when every rank's backward through ``fn`` matches central differences of the global loss.

    ``inputs`` are float64 Tensors of the same shapes on every rank (each rank its own values); every one of them
    is differentiated. Raises ``AssertionError`` naming the rank, the input and the worst element otherwise.
    """
    leaves = []
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor) or x.dtype != np.float64:
            raise TypeError(f"inputs[{i}]: expected a float64 Tensor, got {x!r}")
        leaves.append(tensor(x.numpy(), dtype=np.float64, requires_grad=True))
    output = fn(*leaves)
    weights = np.random.default_rng([seed, comm.rank]).standard_normal(output.shape)
    output.backward(tensor(weights, dtype=np.float64))
    analytical = [np.zeros(x.shape) if x.grad is None else x.grad.numpy() for x in leaves]

    # Every rank evaluates its own term of L at every move of every rank's input; one all-reduce adds the terms.
    moves = [
        (owner, i, position)
        for owner in range(comm.size)
        for i, x in enumerate(leaves)
        for position in np.ndindex(x.shape)
    ]
    local = np.zeros((len(moves), 2))
    for m, (owner, i, position) in enumerate(moves):
        for column, step in enumerate((eps, -eps)):
            moved = leaves[i].numpy()
            if comm.rank == owner:
                moved[position] += step
            args = list(leaves)
            args[i] = tensor(moved, dtype=np.float64)
            local[m, column] = _local_loss(fn, args, weights)
    total = memory.to_device(local)
    comm.all_reduce(total)
    losses = memory.to_host(total)
    numerical = [np.zeros(x.shape) for x in leaves]
    for m, (owner, i, position) in enumerate(moves):
        if comm.rank == owner:
            numerical[i][position] = (losses[m, 0] - losses[m, 1]) / (2 * eps)

    for i, (a, n) in enumerate(zip(analytical, numerical, strict=True)):
        excess = np.abs(a - n) - (atol + rtol * np.abs(n))
        if excess.size and excess.max() > 0:
            k = np.unravel_index(int(np.argmax(excess)), excess.shape)
            raise AssertionError(
                f"gradcheck_ranks: rank {comm.rank}, inputs[{i}] element {tuple(int(j) for j in k)}: "
                f"backward gives {a[k]!r}, central differences {n[k]!r}"
            )
    return True


__all__ = ["gradcheck_ranks"]
