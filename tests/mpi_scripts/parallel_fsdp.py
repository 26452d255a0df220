"""fully_shard (ZeRO stage 3) against one process trained on the same global batches.

``mpiexec -n 3 python parallel_fsdp.py``: the first layer's 5 rows split unevenly on 2, 3 and 4 ranks.
"""

from __future__ import annotations

import numpy as np
import parallel_ddp as shared
from parallel_ddp import STEPS, TOLERANCE, make_model, train

import nbcoll
from nbcoll import optim
from nbcoll.parallel.fsdp import fully_shard, gathered_parameters

HIDDEN = 5


def check(comm, optimizer_class, micro_batches: int, **kwargs) -> str:
    n, r = comm.size, comm.rank
    reference = make_model(0, HIDDEN)
    train(reference, optimizer_class(reference.parameters(), **kwargs), n, None, micro_batches)
    model = fully_shard(make_model(100 * r, HIDDEN), comm)  # rank 0's parameters win
    rows = -(-HIDDEN // n)
    assert model[0].weight.shape == (rows, 5), model[0].weight.shape  # this rank's shard only
    train(model, optimizer_class(model.parameters(), **kwargs), n, r, micro_batches)
    # Unit 1's forward and unit 0's backward find their parameters prefetched by the unit that ran before.
    assert model.fully_shard_schedule.events == [
        ("gather", 0),
        ("forward", 0),
        ("prefetch", 1),
        ("forward", 1),
        ("gather", 1),
        ("backward", 1),
        ("prefetch", 0),
        ("backward", 0),
    ], model.fully_shard_schedule.events
    got = gathered_parameters(model)
    for name, p in reference.named_parameters():
        error = np.max(np.abs(got[name] - p.numpy())) / np.max(np.abs(p.numpy()))
        assert error <= TOLERANCE[shared.DTYPE], f"rank {r}: {name} differs from one process by {error:.2e}"
    return f"{optimizer_class.__name__}: shards of {rows} rows"


def run_checks(comm) -> list[str]:
    """Every check of this file; returns the lines to print."""
    results = [
        check(comm, optim.SGD, 1, lr=0.1, momentum=0.9),
        check(comm, optim.Adam, 2, lr=0.01),
    ]
    model = make_model(0)
    early = optim.SGD(model.parameters(), lr=0.1)
    fully_shard(model, comm)
    try:
        early.step()
    except RuntimeError as exc:
        assert "'Linear.weight' was replaced by its shard" in str(exc), exc
    else:
        raise AssertionError("an optimizer built before fully_shard was not refused")
    if comm.size > 1:  # a replica with another shape is named on every rank before any shard moves
        try:
            fully_shard(make_model(0, 8 if comm.rank == comm.size - 1 else 7), comm)
        except RuntimeError as exc:
            assert "fully_shard: parameter '0.weight' differs across ranks" in str(exc), exc
        else:
            raise AssertionError("parameters of different shapes were not refused")
    try:
        fully_shard(fully_shard(make_model(0), comm), comm)
    except RuntimeError as exc:
        assert "already sharded" in str(exc), exc
    else:
        raise AssertionError("sharding twice was not refused")
    return [f"rank {comm.rank}: fully_shard ok after {STEPS} steps ({'; '.join(results)})"]


def main() -> None:
    comm = nbcoll.init()
    lines = run_checks(comm)
    comm.destroy()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
