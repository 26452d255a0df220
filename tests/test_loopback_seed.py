"""Each rank of a loopback world draws from its own generator, as each process of an MPI job does."""

import numpy as np
import pytest

import nbcoll
from nbcoll import nn
from nbcoll.comm import loopback


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def draws() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a rank draws: a layer's parameters, then a dropout mask."""
    layer = nn.Linear(16, 8)
    mask = nn.Dropout(0.5)(nbcoll.tensor(np.ones(64, np.float32))).numpy()
    return layer.weight.numpy().copy(), layer.bias.numpy().copy(), mask


def one_process() -> tuple[np.ndarray, ...]:
    nbcoll.manual_seed(0)
    return draws()


def assert_every_rank_drew(results, want) -> None:
    for rank, got in enumerate(results):
        for mine, theirs in zip(got, want, strict=True):
            assert np.array_equal(mine, theirs), f"rank {rank} drew other values than one process"


def test_a_seed_set_inside_the_ranks_gives_every_rank_what_one_process_draws():
    want = one_process()

    def rank_fn(comm):
        nbcoll.manual_seed(0)
        comm.barrier()  # every rank has seeded before any draws: one shared generator would now be drawn in turn
        return draws()

    first, second = loopback.run(4, rank_fn), loopback.run(4, rank_fn)
    assert_every_rank_drew(first, want)
    assert_every_rank_drew(second, want)  # and again: nothing depends on how the threads interleave


def test_the_ranks_start_from_the_callers_state_and_leave_it_where_it_was():
    want = one_process()
    nbcoll.manual_seed(0)
    results = loopback.run(3, lambda comm: draws())
    assert_every_rank_drew(results, want)
    # the caller's generator did not move: it draws now what one process draws right after manual_seed(0)
    for mine, theirs in zip(draws(), want, strict=True):
        assert np.array_equal(mine, theirs)
    nbcoll.manual_seed(5)
    loopback.run(2, lambda comm: nbcoll.manual_seed(9))
    assert nbcoll.initial_seed() == 5  # a rank's manual_seed stays on its rank
