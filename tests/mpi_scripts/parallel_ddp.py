"""DistributedDataParallel against one process trained on the same global batches, and its errors.

``mpiexec -n 3 python parallel_ddp.py``: every rank also trains the single-process reference itself (no
communication), so each rank compares its replica with it, parameter by parameter, in float64 within 1e-10
(relative). ``--float32`` (for the simulator) runs toy cases in float32 within 1e-5 (relative): DDP (one step,
two buckets, so the first all-reduce runs on the progress thread while the main thread computes), ZeRO stages 1
and 2 and fully_shard. The two computations add the same numbers in different orders (a mean over the global batch
against a mean of the ranks' means).
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

import nbcoll
from nbcoll import nn, optim
from nbcoll.parallel import DistributedDataParallel

STEPS = 3
PER_RANK = 2  # rows of each micro-batch on each rank
TOLERANCE = {np.float64: 1e-10, np.float32: 1e-5}
DTYPE = np.float64


def make_model(seed: int, hidden: int = 7, first_bias: bool = True) -> nn.Module:
    """5 -> hidden -> 3. Hidden 5 without the first bias: 43 parameters, which no rank count from 2 to 4 divides."""
    nbcoll.manual_seed(seed)
    first = nn.Linear(5, hidden, bias=first_bias, dtype=DTYPE)
    return nn.Sequential(first, nn.Tanh(), nn.Linear(hidden, 3, dtype=DTYPE))


def global_batch(step: int, micro: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([11, step, micro])
    return rng.standard_normal((n * PER_RANK, 5)).astype(DTYPE), rng.standard_normal((n * PER_RANK, 3)).astype(DTYPE)


def train(model, optimizer, n: int, rank: int | None, micro_batches: int) -> None:
    """K steps; ``rank=None`` trains on the whole global batch, else on this rank's rows of it."""
    loss_fn = nn.MSELoss()
    for step in range(STEPS):
        optimizer.zero_grad()
        for m in range(micro_batches):
            x, y = global_batch(step, m, n)
            if rank is not None:
                x, y = x[rank * PER_RANK : (rank + 1) * PER_RANK], y[rank * PER_RANK : (rank + 1) * PER_RANK]
            last = m == micro_batches - 1
            no_sync = getattr(model, "no_sync", contextlib.nullcontext)  # a plain module accumulates anyway
            accumulate = no_sync() if rank is not None and not last else contextlib.nullcontext()
            with accumulate:
                loss = loss_fn(model(nbcoll.tensor(x)), nbcoll.tensor(y)) * (1.0 / micro_batches)
                loss.backward()
        optimizer.step()


def check_matches_one_process(comm, make_optimizer, micro_batches: int, bucket_cap_mb: float) -> str:
    n, r = comm.size, comm.rank
    reference = make_model(seed=0)
    train(reference, make_optimizer(reference.parameters()), n, None, micro_batches)
    ddp = DistributedDataParallel(make_model(seed=100 * r), comm, bucket_cap_mb=bucket_cap_mb)  # rank 0's wins
    train(ddp, make_optimizer(ddp.parameters()), n, r, micro_batches)
    assert_matches(reference, {name: p.numpy() for name, p in ddp.module.named_parameters()}, r)
    return f"{len(ddp.buckets)} buckets"


def assert_matches(reference: nn.Module, got: dict[str, np.ndarray], rank: int, what: str = "") -> None:
    """Every parameter in ``got`` within ``TOLERANCE`` of the reference's, relative to its largest value."""
    for name, p in reference.named_parameters():
        error = np.max(np.abs(got[name] - p.numpy())) / np.max(np.abs(p.numpy()))
        message = f"rank {rank}: {what}{name} differs from one process by {error:.2e} (relative)"
        assert error <= TOLERANCE[DTYPE], message


def check_overlap(comm) -> list:
    """With one bucket per parameter, the first all-reduce is launched before the last gradient arrives."""
    ddp = DistributedDataParallel(make_model(seed=0), comm, bucket_cap_mb=0)
    x, y = global_batch(0, 0, comm.size)
    nn.MSELoss()(ddp(nbcoll.tensor(x)), nbcoll.tensor(y)).backward()
    events = list(ddp.events)
    gradients = [i for i, (kind, _) in enumerate(events) if kind == "gradient"]
    launches = [i for i, (kind, _) in enumerate(events) if kind == "all_reduce"]
    assert len(launches) == len(ddp.buckets) == 4, events
    assert launches[0] < gradients[-1], f"no all-reduce started before backward's last gradient: {events}"
    assert events[-1] == ("synchronized", 4), events
    # Reverse registration order: the last layer's gradients come first and fill bucket 0.
    assert ddp.buckets[0].names == ["2.bias"] and events[0] == ("gradient", "2.bias"), events
    return events


def expect_error(fn, *fragments: str, errors: tuple = (RuntimeError, ValueError, TypeError)) -> None:
    try:
        fn()
    except errors as exc:
        for fragment in fragments:
            assert fragment in str(exc), f"{fragment!r} not in: {exc}"
        return
    raise AssertionError(f"no error raised; expected one mentioning {fragments}")


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3, dtype=np.float64)
        self.head_a = nn.Linear(3, 2, dtype=np.float64)
        self.head_b = nn.Linear(3, 2, dtype=np.float64)
        self.unused = nn.Linear(3, 2, dtype=np.float64)

    def forward(self, x):
        h = self.body(x).tanh()
        return self.head_a(h), self.head_b(h)


def check_errors(comm) -> None:
    x = nbcoll.tensor(np.ones((2, 4)))
    model = TwoHeads()
    ddp = DistributedDataParallel(model, comm, bucket_cap_mb=0)
    expect_error(lambda: DistributedDataParallel(model, comm), "already wrapped")
    expect_error(lambda: ddp(x), "not used to compute the output", "unused.weight", "unused.bias")

    tolerant = DistributedDataParallel(TwoHeads(), comm, bucket_cap_mb=0, find_unused_parameters=True)
    a, b = tolerant(x)
    (a.sum() + b.sum()).backward()
    assert np.all(tolerant.module.unused.weight.grad.numpy() == 0)
    assert tolerant.events[-1][0] == "synchronized"
    a, b = tolerant(x)
    a.sum().backward()  # head_b is in the graph of the output, but the loss does not reach it
    expect_error(lambda: tolerant(x), "got no gradient", "head_b.weight")

    tolerant = DistributedDataParallel(TwoHeads(), comm, find_unused_parameters=True)
    a, b = tolerant(x)
    loss = a.sum() + b.sum()
    loss.backward(retain_graph=True)
    expect_error(lambda: loss.backward(), "second gradient")

    if comm.size > 1:  # a replica with another shape is named on every rank before any gradient moves
        hidden = 8 if comm.rank == comm.size - 1 else 7
        expect_error(lambda: DistributedDataParallel(make_model(0, hidden), comm), "'0.weight' differs across ranks")
    expect_error(lambda: DistributedDataParallel(make_model(0), comm, bucket_cap_mb=-1), "bucket_cap_mb")


def print_checks(run_checks) -> None:
    """The main of the sharding scripts: ``run_checks(comm)`` on every rank, then print the lines it returns."""
    comm = nbcoll.init()
    lines = run_checks(comm)
    comm.destroy()
    print("\n".join(lines))


def main() -> None:
    global DTYPE, STEPS
    parser = argparse.ArgumentParser()
    parser.add_argument("--float32", action="store_true", help="one toy case in float32 (for the simulator)")
    parser.add_argument("--sharding", action="store_true", help="also run parallel_zero.py and parallel_fsdp.py")
    args = parser.parse_args()
    comm = nbcoll.init()
    sgd = lambda params: optim.SGD(params, lr=0.1, momentum=0.9)  # noqa: E731
    adam = lambda params: optim.Adam(params, lr=0.01)  # noqa: E731
    if args.float32:
        DTYPE, STEPS = np.float32, 1
        result = check_matches_one_process(comm, sgd, micro_batches=1, bucket_cap_mb=1e-4)
        import parallel_ddp as shared  # the module the other scripts import (this file runs as __main__)
        import parallel_fsdp
        import parallel_zero

        shared.DTYPE, shared.STEPS = np.float32, 1
        zero = "; ".join(parallel_zero.check_stage(comm, stage, optim.SGD, 1, lr=0.1, momentum=0.9) for stage in (1, 2))
        fsdp = parallel_fsdp.check(comm, optim.SGD, 1, lr=0.1, momentum=0.9)
        comm.destroy()
        print(f"rank {comm.rank}: data parallel float32 ok ({result}; {zero}; fully_shard {fsdp})")
        return
    results = [
        check_matches_one_process(comm, sgd, micro_batches=1, bucket_cap_mb=25),
        check_matches_one_process(comm, adam, micro_batches=1, bucket_cap_mb=1e-4),
        check_matches_one_process(comm, sgd, micro_batches=3, bucket_cap_mb=1e-4),
        check_matches_one_process(comm, adam, micro_batches=2, bucket_cap_mb=0),
    ]
    events = check_overlap(comm)
    check_errors(comm)
    more = []
    if args.sharding:  # in this launch, to start the ranks once for everything
        import parallel_fsdp
        import parallel_zero

        more = parallel_zero.run_checks(comm) + parallel_fsdp.run_checks(comm)
    comm.destroy()
    if comm.rank == 0:
        print("events:", events)
    print(f"rank {comm.rank}: data parallel ok ({', '.join(results)})")
    print("\n".join(more))


if __name__ == "__main__":
    main()
