"""The LL broadcast: its readers' presence lines, a root at most its slots less one round ahead of them, readers
that run ahead of a slow rank, and a poll that looks at the writer's last line first; on a loopback world, on the
simulator and under mpiexec."""

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.errors import CommTimeoutError
from nbcoll.kernels import ll


def _inputs(rank, count, dtype):
    return ((np.arange(count) * 3 + 11 * rank) % 100).astype(dtype)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_small_broadcasts_from_every_root_are_exact_between_other_ll_rounds(nranks):
    """Each root's lines reach every rank, in and out of place, whatever the round before was (a broadcast with
    another root, an all-gather): the readers' presence lines keep the credit chain of the rounds unbroken."""

    def body(comm):
        for dtype in (np.int8, np.float16, np.int64):
            for count in (1, 3, 1000):
                for root in range(comm.size):
                    x = _inputs(comm.rank, count, dtype)
                    got = comm.broadcast(x, np.zeros(count, dtype), root=root, algo="direct")
                    assert np.array_equal(got, _inputs(root, count, dtype)), (dtype, count, root)
                    comm.broadcast(x, root=(root + 1) % comm.size, algo="direct")  # in place
                    assert np.array_equal(x, _inputs((root + 1) % comm.size, count, dtype))
                    gathered = comm.all_gather(x, np.zeros(count * comm.size, dtype), algo="direct")
                    assert np.array_equal(gathered, np.tile(x, comm.size))
        return 0 if comm.engine._ll is None else comm.engine._ll.rounds

    with nbcoll.use_backend("numpy"):
        rounds = loopback.run(nranks, body)
    assert rounds == [0 if nranks == 1 else 3 * 3 * nranks * 3] * nranks  # every call one LL round


@pytest.mark.parametrize("steps", [2, 5, 8])
def test_a_broadcast_root_runs_ahead_of_its_readers_by_at_most_its_slots_less_one(steps):
    """A root that broadcasts while its readers have stopped writes one round into each of its ``steps`` slots,
    then waits for them to begin the round after the oldest one instead of overwriting lines they may still read."""

    def body(comm):
        x = np.arange(3, dtype=np.int32)
        calls = steps + 1 if comm.rank == 0 else 1
        for _ in range(calls):
            comm.broadcast(x, root=0, algo="direct")

    with nbcoll.use_backend("numpy"), pytest.raises(CommTimeoutError) as caught:
        loopback.run(3, body, config=CommConfig(timeout=1.0, steps=steps, buffsize=steps * 8 * 4096))
    message = str(caught.value)
    assert "broadcast" in message and "rank 0" in message
    assert f"ranks [1, 2] to begin LL round 2 before this rank writes round {steps + 1}" in message, message


@pytest.mark.parametrize(
    "backend",
    ["numpy", pytest.param("sim", marks=pytest.mark.simulator)],
)
def test_readers_that_start_late_read_every_round_the_root_wrote_ahead_of_them(backend):
    """The root writes its slots' worth of rounds and returns before any reader has begun; the readers then read
    each round's own words, in order, although the root has moved on."""
    import threading

    steps, count = 4, 5
    root_is_ahead = threading.Event()

    def body(comm):
        device = nbcoll.to_device
        comm.all_gather(device(np.zeros(1, np.int8)), device(np.zeros(3, np.int8)), algo="direct")  # round 1
        got = []
        if comm.rank != 0:
            assert root_is_ahead.wait(10.0), "the root never got ahead"
        for call in range(steps - 1):  # rounds 2 to steps: every slot but round 1's, which the readers have read
            x = _inputs(100 + call, count, np.int8) if comm.rank == 0 else np.zeros(count, np.int8)
            got.append(nbcoll.to_host(comm.broadcast(device(x), root=0, algo="direct")).tolist())
        if comm.rank == 0:
            root_is_ahead.set()
        return got

    with nbcoll.use_backend(backend):
        results = loopback.run(3, body, config=CommConfig(timeout=10.0, steps=steps))
    expected = [_inputs(100 + call, count, np.int8).tolist() for call in range(steps - 1)]
    assert results == [expected] * 3


def test_a_broadcast_reader_announces_itself_while_it_waits_for_the_root_in_one_step():
    """A reader's receive writes its presence line first, before the root has written anything, and then polls:
    one step per round. The root sees that line before it even calls the broadcast."""
    import time

    def body(comm):
        x = np.full(3, comm.rank, np.int32)
        comm.all_gather(x, np.zeros(3 * comm.size, np.int32), algo="direct")  # round 1: the LL buffers exist
        ll_buffers = comm.engine._ll
        if comm.rank == 0:  # wait for the reader's line 0 of round 2, then broadcast round 2
            deadline = time.monotonic() + 5.0
            while int(ll_buffers.lines(1, 2, 0, 1)[0]) >> 32 != 2:
                assert time.monotonic() < deadline, "the reader never announced round 2"
                time.sleep(0.001)
        got = comm.broadcast(x, root=0, algo="direct")
        comm.broadcast(x, root=0, algo="direct")  # the plan is kept: its steps are the replay's
        (replay,) = [r for r in comm.engine.replays.kept.values() if r.name == "broadcast"]
        return got.tolist(), [step.name for step in replay.steps]

    with nbcoll.use_backend("numpy"):
        results = loopback.run(2, body, config=CommConfig(timeout=10.0))
    assert results[0] == ([0, 0, 0], ["ll_send"])  # in place: the root writes its lines, nothing to copy
    assert results[1] == ([0, 0, 0], ["ll_recv"])  # announce, poll and copy: one step


def test_a_poll_that_found_its_round_incomplete_looks_at_the_last_line_first(monkeypatch):
    """After a poll that failed, a reader looks at the writer's last line before the others. A last line that lands
    first (as lines may on a GPU) still leaves the round incomplete until every line is there."""
    import threading
    import time

    store, first_round = ll.store_lines.reference, ll.first_round.reference
    looks = []

    def last_line_first(lines, words, flag_high):
        if lines.size > 1:  # the root's data, not a reader's presence line
            store(lines[-1:], words[-1:], flag_high)
            time.sleep(0.1)  # the readers poll meanwhile
        store(lines, words, flag_high)

    def counted(probe, lines):
        looks.append(threading.current_thread().name)
        return first_round(probe, lines)

    monkeypatch.setattr(ll.store_lines, "reference", last_line_first)
    monkeypatch.setattr(ll.first_round, "reference", counted)

    def body(comm):
        x = np.arange(40, dtype=np.int32) + (1000 if comm.rank == 0 else 0)  # 40 lines: more than SCALAR_LINES
        return comm.broadcast(x, root=0, algo="direct")

    with nbcoll.use_backend("numpy"):
        outs = loopback.run(3, body)
    for out in outs:
        np.testing.assert_array_equal(out, np.arange(40, dtype=np.int32) + 1000)
    assert looks, "no reader looked at the last line alone"


def test_many_small_broadcasts_in_a_row_with_slow_readers_stay_exact():
    import time

    def body(comm):
        x, y = np.zeros(5, np.int64), np.zeros(5, np.int64)
        for call in range(40):
            x[...] = np.arange(5) + 1000 * call + comm.rank
            if comm.rank and call % 7 == comm.rank:
                time.sleep(0.01)  # a reader falls behind; the root must not overwrite what it still reads
            assert np.array_equal(comm.broadcast(x, y, root=0, algo="direct"), np.arange(5) + 1000 * call)
        return comm.engine.replays.hits

    with nbcoll.use_backend("numpy"):
        assert loopback.run(3, body) == [39] * 3  # replayed after the first call


def mixed_small_calls(comm, calls=150):
    """A seeded mix of broadcasts from every root (replayed and not), all-reduces and all-gathers, with random
    pauses on each rank, on the current backend; asserts every result; returns the LL rounds used."""
    import time

    from nbcoll.kernels.copy import copy

    dev, host = nbcoll.to_device, nbcoll.to_host
    pauses = np.random.default_rng(comm.rank)  # each rank pauses at its own calls
    plan = np.random.default_rng(7)  # every rank makes the same calls
    kept = nbcoll.zeros(3, np.int64)  # the same buffer every time: those broadcasts are replays
    for i in range(calls):
        kind, root = int(plan.integers(0, 4)), int(plan.integers(0, comm.size))
        if pauses.random() < 0.15:
            time.sleep(pauses.random() * 3e-3)
        mine = np.arange(3, dtype=np.int64) + 100 * comm.rank + i
        everyone = [np.arange(3, dtype=np.int64) + 100 * r + i for r in range(comm.size)]
        if kind == 0:
            copy(kept, dev(mine))
            assert np.array_equal(host(comm.broadcast(kept, root=root, algo="direct")), everyone[root])
        elif kind == 1:
            got = comm.broadcast(dev(mine.astype(np.int8)), nbcoll.zeros(3, np.int8), root=root, algo="direct")
            assert np.array_equal(host(got), everyone[root].astype(np.int8))
        elif kind == 2:
            got = comm.all_reduce(dev(mine), nbcoll.zeros(3, np.int64), algo="direct")
            assert np.array_equal(host(got), sum(everyone))
        else:
            got = comm.all_gather(dev(mine), nbcoll.zeros(3 * comm.size, np.int64), algo="direct")
            assert np.array_equal(host(got), np.concatenate(everyone))
    return comm.engine._ll.rounds


def mixed_small_calls_on_a_new_communicator(calls):
    """:func:`mixed_small_calls` on ``nbcoll.init()``: what each rank of an mpiexec job runs."""
    comm = nbcoll.init()
    try:
        return mixed_small_calls(comm, calls)
    finally:
        comm.destroy()


@pytest.mark.parametrize("nranks", [3, 4])
def test_ll_rounds_stay_exact_when_readers_run_ahead_of_a_slow_rank(nranks):
    """A broadcast's readers write their presence lines without waiting, so a rank may be rounds ahead of a slow
    one when a data round comes; that write must still wait for every peer. Every result of the mix is exact."""
    with nbcoll.use_backend("numpy"):
        assert loopback.run(nranks, mixed_small_calls, config=CommConfig(timeout=5.0)) == [150] * nranks


@pytest.mark.simulator
def test_ll_rounds_stay_exact_when_readers_run_ahead_on_the_simulator():
    """The line kernels themselves (store, load, rounds) in the same mix, fewer calls: the simulator is slow."""
    with nbcoll.use_backend("sim"):
        assert loopback.run(3, mixed_small_calls, 24, config=CommConfig(timeout=60.0)) == [24] * 3


@pytest.mark.mpi
def test_ll_rounds_stay_exact_when_readers_run_ahead_under_mpiexec():
    """The same mix on 4 processes, whose LL buffers are shared memory (threads of one process share the GIL)."""
    from nbcoll.launch import launch

    result = launch(4, function=mixed_small_calls_on_a_new_communicator, args=(300,), timeout=120,
                    env={"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "20"}).check()  # fmt: skip
    assert result.returns == [300] * 4
