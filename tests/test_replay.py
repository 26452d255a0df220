"""Replays: a small LL collective called again with the same buffers reruns its kept steps in a new round, exact,
and any change of the arguments (another object, a new shape, a read-only output, async, a group, NBCOLL_CHECK)
takes the full path with its checks; an error on one rank of a replayed call is refused everywhere."""

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback, replay
from nbcoll.comm.errors import CommError
from nbcoll.kernels.combine import premul_sum


def _values(rank, count, call, dtype=np.int64):
    return (np.arange(count) * 7 + 13 * rank + 101 * call).astype(dtype)


def _five_collectives(comm, calls, count=3):
    """Every LL collective ``calls`` times on the same buffers, new values written in between; checks each result."""
    n, r = comm.size, comm.rank
    x, y, full, swapped, mine = (np.zeros(k, np.int64) for k in (count, count, count * n, count * n, count))
    blocks = np.zeros(count * n, np.int64)
    for call in range(calls):
        x[...] = _values(r, count, call)
        blocks[...] = _values(r, count * n, call)
        everyone = [_values(p, count, call) for p in range(n)]
        everyone_blocks = [_values(p, count * n, call) for p in range(n)]
        own = slice(r * count, (r + 1) * count)
        assert np.array_equal(comm.all_reduce(x, y, algo="direct"), sum(everyone))
        assert np.array_equal(comm.all_gather(x, full, algo="direct"), np.concatenate(everyone))
        assert np.array_equal(comm.all_to_all(blocks, swapped), np.concatenate([b[own] for b in everyone_blocks]))
        assert np.array_equal(comm.reduce_scatter(blocks, mine, op="max"), np.max(everyone_blocks, axis=0)[own])
        comm.all_reduce(x, algo="direct")  # in place: on 3 ranks and more the fold keeps this rank's input first
        assert np.array_equal(x, sum(everyone))
    return comm.engine.replays.hits


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_repeated_calls_on_the_same_buffers_are_replayed_and_exact(nranks):
    with nbcoll.use_backend("numpy"):
        hits = loopback.run(nranks, _five_collectives, 4)
    assert hits == [0 if nranks == 1 else 5 * 3] * nranks  # the first call of each plans, the next three replay


@pytest.mark.simulator
def test_replays_run_on_the_simulator():
    with nbcoll.use_backend("sim"):

        def body(comm):
            x, y = nbcoll.zeros(3, np.int32), nbcoll.zeros(3, np.int32)
            for call in range(3):
                x[:] = nbcoll.to_device(_values(comm.rank, 3, call, np.int32))
                got = nbcoll.to_host(comm.all_reduce(x, y, algo="direct"))
                assert np.array_equal(got, sum(_values(p, 3, call, np.int32) for p in range(comm.size)))
            return comm.engine.replays.hits

        assert loopback.run(2, body) == [2, 2]


def test_a_changed_argument_takes_the_full_path():
    def body(comm):
        n, r = comm.size, comm.rank
        x, y = np.full(4, r + 1, np.int32), np.zeros(4, np.int32)
        comm.all_reduce(x, y)
        comm.all_reduce(x, y)
        hits = [comm.engine.replays.hits]
        comm.all_reduce(x, np.zeros(4, np.int32))  # another output object
        comm.all_reduce(x, y, op="max")  # another op
        comm.all_reduce(x, y, algo="direct")  # an algorithm named (the tuner's choice was not named)
        comm.all_reduce(x, y, async_op=True).wait()  # async: a handle, the full path
        with comm.group():
            comm.all_reduce(x, y)
        hits.append(comm.engine.replays.hits)
        y.shape = (2, 2)  # the same object, reshaped in place: still 4 elements, a new layout
        comm.all_reduce(x, y)
        hits.append(comm.engine.replays.hits)
        y.shape = (4,)  # back: the plan kept last was for the (2, 2) layout, so the full path again
        assert np.array_equal(comm.all_reduce(x, y), np.full(4, n * (n + 1) // 2))
        hits.append(comm.engine.replays.hits)
        return hits

    with nbcoll.use_backend("numpy"):
        assert loopback.run(3, body) == [[1, 1, 1, 1]] * 3


# A replay asks MPI for the peers' notes at most every NOTE_PROBE_SECONDS: 0 probes on every call, and 60 never in
# the test, so that a refusal or an abort must be heard some other way (the control page, the watchdog's waits).
PROBE_EVERY_CALL_OR_NEVER = pytest.mark.parametrize("note_probe_seconds", [0.0, 60.0], ids=["probe", "no-probe"])


@PROBE_EVERY_CALL_OR_NEVER
def test_a_buffer_made_read_only_on_one_rank_is_refused_there_and_no_rank_returns_a_result(
    monkeypatch, note_probe_seconds
):
    monkeypatch.setattr(replay, "NOTE_PROBE_SECONDS", note_probe_seconds)

    def body(comm):
        r = comm.rank
        x, y = np.full(4, r + 1, np.int32), np.zeros(4, np.int32)
        comm.all_reduce(x, y)
        comm.all_reduce(x, y)  # replayed on every rank
        if r == 1:
            y.flags.writeable = False
        before = y.copy()
        x[...] = 100
        try:
            comm.all_reduce(x, y)
        except ValueError as exc:
            assert r == 1 and "recvbuf: is read-only" in str(exc), exc
            return "refused"
        except CommError as exc:  # the others learn of the refusal instead of reading what rank 1 never wrote
            assert np.array_equal(y, before), "a result was written although a peer refused the call"
            return type(exc).__name__
        return "returned"

    with nbcoll.use_backend("numpy"):
        outcomes = loopback.run(3, body, config=CommConfig(timeout=20.0))
    assert outcomes[1] == "refused" and outcomes[0] == outcomes[2] == "CommAbortedError", outcomes


@PROBE_EVERY_CALL_OR_NEVER
def test_a_replay_on_an_aborted_or_destroyed_communicator_is_refused_and_writes_nothing(
    monkeypatch, note_probe_seconds
):
    monkeypatch.setattr(replay, "NOTE_PROBE_SECONDS", note_probe_seconds)

    def body(comm):
        r = comm.rank
        x, y = np.full(4, r + 1, np.int32), np.zeros(4, np.int32)
        comm.all_reduce(x, y)
        comm.all_reduce(x, y)  # replayed on every rank
        assert comm.engine.replays.hits == 1
        if r == 1:
            comm.abort()
        before = y.copy()
        x[...] = 100
        try:
            comm.all_reduce(x, y)
        except CommError as exc:
            assert np.array_equal(y, before), "a replay wrote a result on an aborted communicator"
            outcome = type(exc).__name__
        else:
            outcome = "returned"
        comm.destroy()
        try:
            comm.all_reduce(x, y)
        except ValueError as exc:
            assert "destroyed" in str(exc), exc
            return outcome, "refused after destroy"
        return outcome, "ran after destroy"

    with nbcoll.use_backend("numpy"):
        outcomes = loopback.run(3, body, config=CommConfig(timeout=20.0))
    assert outcomes == [("CommAbortedError", "refused after destroy")] * 3, outcomes


def test_nbcoll_check_compares_every_call_so_nothing_is_replayed():
    def body(comm):
        x, y = np.ones(4, np.int32), np.zeros(4, np.int32)
        for _ in range(3):
            assert np.array_equal(comm.all_reduce(x, y), np.full(4, comm.size))
        return comm.engine.replays, "all_reduce" in vars(comm)  # no plans kept, no replay hook on the method

    with nbcoll.use_backend("numpy"):
        assert loopback.run(2, body, config=CommConfig(check=True)) == [(None, False)] * 2


def test_a_premul_sum_is_never_kept_and_is_exact():
    def body(comm):
        x, y = np.ones(4, np.float64), np.zeros(4, np.float64)
        for _ in range(2):
            comm.all_reduce(x, y, op=premul_sum(0.5))
            assert np.array_equal(y, np.full(4, comm.size * 0.5))
        return comm.engine.replays.hits

    with nbcoll.use_backend("numpy"):
        assert loopback.run(2, body) == [0, 0]


def test_the_kept_plans_are_bounded_and_hold_no_buffer_the_program_dropped():
    import gc
    import weakref

    from nbcoll.comm.replay import MAX_REPLAYS

    def body(comm):
        live = [(np.ones(2, np.int32), np.zeros(2, np.int32)) for _ in range(MAX_REPLAYS + 5)]
        for x, y in live:  # buffers the program keeps: a plan each, the oldest dropped beyond the bound
            comm.all_reduce(x, y)
        bounded = len(comm.engine.replays.kept)
        out = np.zeros(1 << 16, np.int32)
        comm.all_reduce(np.ones(1 << 16, np.int32), out)  # a one-off input, dropped at once
        dropped = weakref.ref(out)
        del out, live, x, y
        gc.collect()
        return bounded, dropped() is None, len(comm.engine.replays.kept)

    with nbcoll.use_backend("numpy"):
        assert loopback.run(2, body) == [(MAX_REPLAYS, True, 0)] * 2  # freed, and every plan forgotten with them


@pytest.mark.parametrize("registered", [False, True])
def test_window_rounds_are_replayed_too_with_plain_and_registered_buffers(registered):
    """Above NBCOLL_LL_BYTES the one-shot collectives read the windows (a registered input in place): their kept
    steps run again in new window rounds, several rounds per call when the message is larger than a window."""

    def body(comm):
        n, r = comm.size, comm.rank
        count = 700  # 5600 bytes of int64: two rounds of a 4 KiB window
        make = (lambda k: comm.alloc(k, np.int64)) if registered else (lambda k: np.zeros(k, np.int64))
        x, blocks = make(count), make(count * n)
        y, full, swapped = np.zeros(count, np.int64), np.zeros(count * n, np.int64), np.zeros(count * n, np.int64)
        for call in range(3):
            x[...] = _values(r, count, call)
            blocks[...] = _values(r, count * n, call)
            own = slice(r * count, (r + 1) * count)
            assert np.array_equal(comm.all_reduce(x, y, algo="direct"), sum(_values(p, count, call) for p in range(n)))
            assert np.array_equal(
                comm.all_gather(x, full, algo="direct"), np.concatenate([_values(p, count, call) for p in range(n)])
            )
            got = comm.all_to_all(blocks, swapped, algo="direct")
            assert np.array_equal(got, np.concatenate([_values(p, count * n, call)[own] for p in range(n)]))
            assert np.array_equal(comm.broadcast(x, y, root=call % n, algo="direct"), _values(call % n, count, call))
        hits = comm.engine.replays.hits
        if registered:
            comm.free(x)  # a kept plan may lend x: every kept plan goes
            assert not comm.engine.replays.kept
        return hits, comm.engine._windows.rounds

    with nbcoll.use_backend("numpy"):
        got = loopback.run(3, body, config=CommConfig(ll_bytes=0, buffsize=4096))
    # all-reduce, all-gather, all-to-all: 2 calls of 3 replayed; the broadcasts change root on every call
    assert [hits for hits, _ in got] == [6] * 3
    assert len({rounds for _, rounds in got}) == 1


def test_a_replay_reads_whatever_its_peer_lends_this_time():
    """A replaying rank keeps the views of what its peers lent (window_step.WindowStep.source), by registration and
    offset: a peer that lends another registered buffer, another part of one, or a plain one (staged in its
    window) is read where it is now; and a peer that lends ever new buffers does not grow the kept views."""

    def body(comm):
        count, r = 50, comm.rank
        x, out = comm.alloc(count, np.int64), np.zeros(2 * count, np.int64)
        big, plain = comm.alloc(3 * count, np.int64), np.zeros(count, np.int64)
        peer_inputs = [comm.alloc(count, np.int64) for _ in range(12)] + [big[count : 2 * count], big[:count], plain]
        seen, largest = [], 0
        for call, other in enumerate(peer_inputs):
            mine = x if r == 0 else other  # rank 0: the same buffers on every call, so a replay from the second on
            mine[...] = _values(r, count, call)
            comm.all_gather(mine, out, algo="direct")
            seen.append(bool(np.array_equal(out, np.concatenate([_values(p, count, call) for p in range(2)]))))
            kept = comm.engine.replays.kept.values()
            largest = max([largest] + [len(s.views) for plan in kept for s in plan.steps if hasattr(s, "views")])
        return all(seen), comm.engine.replays.hits, largest

    with nbcoll.use_backend("numpy"):
        (exact0, hits0, largest0), (exact1, _, _) = loopback.run(2, body, config=CommConfig(ll_bytes=0))
    assert exact0 and exact1
    assert hits0 == 14  # rank 0 replayed every call after its first
    assert 0 < largest0 <= 8  # at most 4 views per rank (2 ranks) before they start afresh


def test_a_replay_behind_work_in_flight_waits_its_turn_and_one_whose_peer_never_comes_times_out():
    from nbcoll.comm.errors import CommTimeoutError

    def in_flight(comm):
        n = comm.size
        x, y, big = np.ones(4, np.int64), np.zeros(4, np.int64), np.ones(1 << 16, np.int64)
        comm.all_reduce(x, y)  # kept
        work = comm.all_reduce(big, algo="ring", async_op=True)  # still running when the replay comes
        comm.all_reduce(x, y)  # a replay, queued behind the ring: the connections are used in issue order
        assert np.array_equal(work.wait(), np.full(1 << 16, n)) and np.array_equal(y, np.full(4, n))
        return comm.engine.replays.hits

    def one_rank_stops(comm):
        x, y = np.ones(2, np.int32), np.zeros(2, np.int32)
        for _ in range(3 if comm.rank == 0 else 2):  # rank 1 never makes the third call, a replay on rank 0
            comm.all_reduce(x, y)

    with nbcoll.use_backend("numpy"):
        assert loopback.run(2, in_flight) == [1, 1]
        with pytest.raises(CommTimeoutError) as caught:
            loopback.run(2, one_rank_stops, config=CommConfig(timeout=1.0))
    message = str(caught.value)
    assert "all_reduce" in message and "rank 0" in message, message
    assert "ranks [1] to write their LL lines of round 3" in message, message


def test_a_replayed_step_that_is_not_ready_is_polled_briefly_before_the_watchdog_takes_it(monkeypatch):
    import time

    class Step:
        def __init__(self, ready_after):
            self.polls, self.ready_after = 0, ready_after

        def ready(self):
            self.polls += 1
            return self.polls > self.ready_after

    monkeypatch.setattr(replay, "SHORT_POLL_SECONDS", 30.0)  # however loaded the machine, a few polls fit
    soon = Step(ready_after=3)
    assert replay.ready_soon(soon) and soon.polls == 4  # ready on the fourth poll: no loop
    monkeypatch.setattr(replay, "SHORT_POLL_SECONDS", 0.02)
    never = Step(ready_after=10**9)
    start = time.perf_counter()
    assert not replay.ready_soon(never)  # given up after SHORT_POLL_SECONDS, for the loop
    assert never.polls >= 1 and time.perf_counter() - start >= 0.02
