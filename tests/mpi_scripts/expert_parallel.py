"""Expert parallelism, every case in one launch: spread experts against every expert local, then K steps.

``mpiexec -n 4 python expert_parallel.py``: float64. The reference layer holds every expert on a one-rank
communicator (``comm.split(rank)``); the spread layer holds ``num_experts / n`` per rank. Prints
``expert parallel ok: N cases`` on every rank.
"""

from __future__ import annotations

import numpy as np
from reference_checks import close, compare_states, expect_error, main

import nbcoll
from nbcoll import nn
from nbcoll.parallel.experts import (
    MixtureOfExperts,
    all_reduce_shared_gradients,
    full_expert_state,
    load_expert_state,
)

DIM, HIDDEN, TOKENS = 6, 8, (2, 5)


def grad_of(p):
    """The gradient, zeros for an expert that no token reached."""
    return np.zeros(p.shape) if p.grad is None else p.grad.numpy()


def summed(comm, array):
    out = nbcoll.empty(array.shape, array.dtype)
    comm.all_reduce(nbcoll.to_device(np.ascontiguousarray(array)), out)
    return nbcoll.to_host(out)


def check_token_for_token(comm, solo, top_k, capacity_factor) -> None:
    """One forward and backward on each rank's own tokens: outputs, input and parameter gradients, drops."""
    n, r = comm.size, comm.rank
    experts = 2 * n
    nbcoll.manual_seed(31)
    local = MixtureOfExperts(DIM, HIDDEN, experts, solo, top_k=top_k, capacity_factor=capacity_factor)
    spread = load_expert_state(
        MixtureOfExperts(DIM, HIDDEN, experts, comm, top_k=top_k, capacity_factor=capacity_factor),
        local.state_dict(),
        comm,
    )
    rng = np.random.default_rng([32, r])
    x, weights = rng.standard_normal(TOKENS + (DIM,)), rng.standard_normal(TOKENS + (DIM,))
    results = []
    for layer in (local, spread):
        xt = nbcoll.tensor(x, requires_grad=True)
        y = layer(xt)
        ((y * nbcoll.tensor(weights)).sum() + layer.aux_loss).backward()
        results.append((y.numpy(), xt.grad.numpy(), dict(layer.stats)))
    what = f"top_k={top_k} capacity_factor={capacity_factor}"
    close(results[1][0], results[0][0], f"{what}: output")
    close(results[1][1], results[0][1], f"{what}: input gradient")
    assert results[1][2] == results[0][2], (results[1][2], results[0][2])
    stats = results[0][2]
    kept = sum(stats["per_expert"])
    assert stats["dropped"] == stats["tokens"] * top_k - kept and max(stats["per_expert"]) <= stats["capacity"]
    if capacity_factor < 1:
        assert stats["dropped"] > 0, stats
    close(spread.gate.weight.grad.numpy(), local.gate.weight.grad.numpy(), f"{what}: gate gradient")
    # An expert's gradient gathers every rank's tokens: the sum of the local layers' gradients over ranks.
    for e, reference in enumerate(local.experts):
        for name, q in reference.named_parameters():
            total = summed(comm, grad_of(q))  # collective: every rank, every expert, in order
            if e // spread.local_experts == r:
                p = dict(spread.experts[e % spread.local_experts].named_parameters())[name]
                close(grad_of(p), total, f"{what}: expert {e} {name} gradient")


def check_training(comm, solo, steps) -> None:
    """K SGD steps of ``x + moe(x)`` with the balance loss: spread over ranks against one process."""
    n, r = comm.size, comm.rank
    nbcoll.manual_seed(33)
    reference = MixtureOfExperts(DIM, HIDDEN, 2 * n, solo, top_k=2, capacity_factor=1.0)
    spread = load_expert_state(
        MixtureOfExperts(DIM, HIDDEN, 2 * n, comm, top_k=2, capacity_factor=1.0), reference.state_dict(), comm
    )
    optimizers = [nbcoll.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (reference, spread)]
    rng = np.random.default_rng(34)
    mse = nn.MSELoss()

    def loss_of(layer, x, target):
        xt = nbcoll.tensor(x)
        return mse(xt + layer(xt), nbcoll.tensor(target)) + 0.01 * layer.aux_loss

    for _ in range(steps):
        xs, targets = rng.standard_normal((n,) + TOKENS + (DIM,)), rng.standard_normal((n,) + TOKENS + (DIM,))
        for opt in optimizers:
            opt.zero_grad()
        for s in range(n):  # one process: the same groups of tokens, the mean of their losses
            (loss_of(reference, xs[s], targets[s]) * (1.0 / n)).backward()
        (loss_of(spread, xs[r], targets[r]) * (1.0 / n)).backward()
        all_reduce_shared_gradients(spread, comm)
        for opt in optimizers:
            opt.step()
    compare_states(full_expert_state(spread, comm), reference.state_dict(), f"after {steps} steps")


def check_toy_float32(comm) -> int:
    """One SGD step of the experts spread over ranks against one process holding them all, float32 at toy size
    (for the simulator): each rank's input gradient and every parameter after the step, rtol 1e-5, atol 1e-6.

    Top-1 routing with a capacity factor of ``num_experts`` drops no token however the tokens are grouped, and the
    loss (a weighted sum of the outputs) adds up over tokens, so rank 0 alone, training on every rank's tokens at
    once, is the one-process reference (the simulator is slow: it runs once, not on every rank)."""
    nbcoll.set_default_dtype(np.float32)
    n, r = comm.size, comm.rank
    solo = comm.split(r)
    nbcoll.manual_seed(35)
    reference = MixtureOfExperts(3, 4, n, solo, top_k=1, capacity_factor=n)
    spread = MixtureOfExperts(3, 4, n, comm, top_k=1, capacity_factor=n)
    load_expert_state(spread, reference.state_dict(), comm)
    rng = np.random.default_rng(36)
    xs, weights = rng.standard_normal((2, n, 3, 3)).astype(np.float32)  # every rank's 3 tokens, and loss weights

    def train(layer, x, w) -> np.ndarray:
        xt = nbcoll.tensor(x, requires_grad=True)
        opt = nbcoll.optim.SGD(layer.parameters(), lr=0.5)
        (layer(xt) * nbcoll.tensor(w)).sum().backward()
        if layer is spread:
            all_reduce_shared_gradients(spread, comm)
        opt.step()
        return xt.grad.numpy()

    want_grad = np.zeros_like(xs)
    if r == 0:
        want_grad = train(reference, xs, weights)
    got_grad = train(spread, xs[r], weights[r])
    everything = [want_grad] + [np.array(v) for v in reference.state_dict().values()]
    for value in everything:  # rank 0's reference, to every rank
        buffer = nbcoll.to_device(np.ascontiguousarray(value))
        comm.broadcast(buffer, root=0)
        value[...] = nbcoll.to_host(buffer)
    np.testing.assert_allclose(got_grad, everything[0][r], rtol=1e-5, atol=1e-6, err_msg="float32 input gradient")
    got = full_expert_state(spread, comm)
    for name, value in zip(reference.state_dict(), everything[1:], strict=True):
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=f"float32 {name} after a step")
    solo.destroy()
    nbcoll.set_default_dtype(np.float64)
    return 1


def run(comm, steps: int = 3) -> int:
    solo = comm.split(comm.rank)
    cases = 0
    for top_k, capacity_factor in [(1, 1.0), (2, 1.25), (2, 0.5)]:
        check_token_for_token(comm, solo, top_k, capacity_factor)
        cases += 1
    check_training(comm, solo, steps)
    solo.destroy()
    if comm.size > 1:
        expect_error(lambda: MixtureOfExperts(4, 4, comm.size + 1, comm), ["num_experts", "evenly"])
    expect_error(lambda: MixtureOfExperts(4, 4, 2 * comm.size, comm, top_k=0), ["top_k"])
    return cases + 3


if __name__ == "__main__":
    main("expert parallel", lambda comm, args: run(comm, args.steps))
