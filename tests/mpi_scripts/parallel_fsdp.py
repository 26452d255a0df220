"""fully_shard (ZeRO stage 3) against one process trained on the same global batches.

``mpiexec -n 3 python parallel_fsdp.py``: the first layer's 5 rows split unevenly on 2, 3 and 4 ranks.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import numpy as np
import parallel_ddp as shared
from parallel_ddp import STEPS, expect_error, make_model, train

import nbcoll
from nbcoll import nn, optim
from nbcoll.parallel.fsdp import Shard, fully_shard, gathered_parameters

HIDDEN = 5
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")


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
    shared.assert_matches(reference, gathered_parameters(model), r)
    return f"{optimizer_class.__name__}: shards of {rows} rows"


@contextlib.contextmanager
def counting_collectives(comm, forbidden: bool = False):
    """Count this rank's collective calls by name (``forbidden``: any call raises instead)."""
    calls: Counter = Counter()

    def wrap(name, method):
        def counted(*args, **kwargs):
            if forbidden:
                raise AssertionError(f"rank {comm.rank}: {name} called where no communication was expected")
            calls[name] += 1
            return method(*args, **kwargs)

        return counted

    for name in COLLECTIVES + ("barrier",):
        setattr(comm, name, wrap(name, getattr(comm, name)))  # an instance attribute hides the method
    try:
        yield calls
    finally:
        for name in COLLECTIVES + ("barrier",):
            delattr(comm, name)


def gathers_per_pass(comm, model) -> tuple[int, int]:
    """All-gathers issued by one forward and by its backward."""
    x, y = shared.global_batch(0, 0, comm.size)
    with counting_collectives(comm) as forward_calls:
        loss = nn.MSELoss()(model(nbcoll.tensor(x[: shared.PER_RANK])), nbcoll.tensor(y[: shared.PER_RANK]))
    with counting_collectives(comm) as backward_calls:
        loss.backward()
    return forward_calls["all_gather"], backward_calls["all_gather"]


def check_kept_after_forward(comm) -> str:
    """reshard_after_forward=False: the same model as one process, and backward gathers nothing."""
    n, r = comm.size, comm.rank
    reference = make_model(0, HIDDEN)
    train(reference, optim.SGD(reference.parameters(), lr=0.1, momentum=0.9), n, None, 2)
    model = fully_shard(make_model(100 * r, HIDDEN), comm, reshard_after_forward=False)
    train(model, optim.SGD(model.parameters(), lr=0.1, momentum=0.9), n, r, 2)  # two micro-batches accumulate
    # Unit 0's forward gathers, unit 1's finds its gather prefetched; backward uses what forward kept.
    events = model.fully_shard_schedule.events
    assert events == [("gather", 0), ("forward", 0), ("prefetch", 1), ("forward", 1), ("backward", 1), ("backward", 0)]
    shared.assert_matches(reference, gathered_parameters(model), r)
    kept = gathers_per_pass(comm, model)
    resharded = gathers_per_pass(comm, fully_shard(make_model(0, HIDDEN), comm))
    assert kept == (2, 0) and resharded == (2, 2), (kept, resharded)
    return f"all-gathers in forward, backward: kept {kept}, resharded {resharded}"


def check_state_dict(comm) -> str:
    """state_dict() moves nothing; the shards of all ranks, placed at their offsets, give the one-process state."""
    n, r = comm.size, comm.rank
    reference = make_model(0, HIDDEN)
    train(reference, optim.Adam(reference.parameters(), lr=0.01), n, None, 1)
    model = fully_shard(make_model(0, HIDDEN), comm)
    train(model, optim.Adam(model.parameters(), lr=0.01), n, r, 1)
    with counting_collectives(comm, forbidden=True):
        state = model.state_dict()
    assert set(state) == {name for name, _ in reference.named_parameters()}, sorted(state)
    for name, p in reference.named_parameters():
        mine = state[name]
        assert isinstance(mine, Shard) and mine.shape == p.shape, (name, mine)
        pieces = np.zeros((n,) + mine.local.shape, mine.local.dtype)
        comm.all_gather(np.ascontiguousarray(mine.local), pieces)  # every rank's shard, to check the offsets
        places = np.zeros((n, 2), np.int64)
        comm.all_gather(np.array([mine.row_offset, mine.valid_rows], np.int64), places)
        whole = np.full(p.shape, np.nan, mine.local.dtype)
        for rank in range(n):
            Shard(pieces[rank], int(places[rank, 0]), int(places[rank, 1]), mine.shape).place(whole)
        error = np.max(np.abs(whole - p.numpy())) / np.max(np.abs(p.numpy()))  # NaN if a row was never placed
        assert error <= shared.TOLERANCE[shared.DTYPE], f"rank {r}: {name} reassembled differs by {error:.2e}"
    model.load_state_dict(state)  # shards load back as they are
    return f"state_dict of {len(state)} shards, 0 collectives"


def run_checks(comm) -> list[str]:
    """Every check of this file; returns the lines to print."""
    results = [
        check(comm, optim.SGD, 1, lr=0.1, momentum=0.9),
        check(comm, optim.Adam, 2, lr=0.01),
        check_kept_after_forward(comm),
        check_state_dict(comm),
    ]
    model = make_model(0)
    early = optim.SGD(model.parameters(), lr=0.1)
    fully_shard(model, comm)
    expect_error(early.step, "'Linear.weight' was replaced by its shard", errors=(RuntimeError,))
    if comm.size > 1:  # a replica with another shape is named on every rank before any shard moves
        hidden = 8 if comm.rank == comm.size - 1 else 7
        expect_error(
            lambda: fully_shard(make_model(0, hidden), comm),
            "fully_shard: parameter '0.weight' differs across ranks",
            errors=(RuntimeError,),
        )
    expect_error(lambda: fully_shard(fully_shard(make_model(0), comm), comm), "already sharded", errors=(RuntimeError,))
    return [f"rank {comm.rank}: fully_shard ok after {STEPS} steps ({'; '.join(results)})"]


if __name__ == "__main__":
    shared.print_checks(run_checks)
