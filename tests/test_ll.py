"""The LL protocol: its line kernels against their references, and the small one-shot collectives that use it,
exact on 1-4 ranks of a loopback world, once under mpiexec over ipc, and bounded by the watchdog."""

import json

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.errors import CommTimeoutError
from nbcoll.kernels import ll
from nbcoll.testing import run_ranks

# -- the line kernels ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 5, 257])
def test_store_then_load_gives_back_the_words_and_counts_stale_lines(backend, n):
    words = (np.arange(n, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32)  # high bits set too
    lines = nbcoll.to_device(np.zeros(n, np.uint64))
    ll.store(lines, nbcoll.to_device(words), round_=7)
    host = nbcoll.to_host(lines)
    np.testing.assert_array_equal(host >> np.uint64(32), np.full(n, 7, np.uint64))  # the flag rides with the data
    np.testing.assert_array_equal((host & np.uint64(0xFFFFFFFF)).astype(np.uint32), words)
    out = nbcoll.zeros(n, np.uint32)
    assert ll.load(out, lines, round_=7) == 0
    np.testing.assert_array_equal(nbcoll.to_host(out), words)
    assert ll.load(out, lines, round_=8) == n  # a round not written yet: every line is missing


def test_a_half_written_round_is_not_ready(backend):
    lines = nbcoll.to_device(np.zeros(6, np.uint64))
    ll.store(lines, nbcoll.to_device(np.arange(6, dtype=np.uint32)), round_=2)
    ll.store(lines[:4], nbcoll.to_device(np.arange(4, dtype=np.uint32)), round_=3)  # the writer is mid-round
    assert ll.load(nbcoll.zeros(6, np.uint32), lines, round_=3) == 2


@pytest.mark.parametrize("n", [ll.SCALAR_LINES, ll.SCALAR_LINES + 1])
def test_the_reference_reads_a_few_lines_as_ints_and_more_as_arrays_with_one_meaning(n):
    lines = np.arange(n, dtype=np.uint64) | np.uint64(9 << 32)
    lines[::3] = np.arange(0, n, 3, dtype=np.uint64) | np.uint64(8 << 32)  # every third line still of round 8
    words, missing = np.zeros(n, np.uint32), np.zeros(1, np.int32)
    stale = len(range(0, n, 3))
    assert ll.load_reference(words, lines, ll.flag_of(9), missing) == missing[0] == stale
    lines[::3] = np.arange(0, n, 3, dtype=np.uint64) | np.uint64(9 << 32)  # the last lines land: the round is whole
    lines[1] |= np.uint64(0xFFFFFFFF)  # a data word with every bit set: the copy must not carry into the flag
    assert ll.load_reference(words, lines, ll.flag_of(9), missing) == missing[0] == 0
    expected = np.arange(n, dtype=np.uint32)
    expected[1] = 0xFFFFFFFF
    np.testing.assert_array_equal(words, expected)


@pytest.mark.parametrize("n", [0, 1, ll.SCALAR_STORES, ll.SCALAR_STORES + 1])
def test_the_reference_writes_a_few_lines_as_ints_and_more_with_a_ufunc_with_one_meaning(n):
    lines = np.full(n + 1, 0xAB, np.uint64)  # one line more: the store must leave it alone
    words = np.arange(n, dtype=np.uint32) + np.uint32(0xFFFFFFF0)  # high words: the OR must not carry
    ll.store_reference(lines[:n], words, ll.flag_of(6))
    np.testing.assert_array_equal(lines[:n], words.astype(np.uint64) | np.uint64(6 << 32))
    assert lines[n] == 0xAB


def test_the_round_wraps_around_without_reaching_zero():
    assert ll.flag_of(1) == ll.flag_of(ll.MAX_ROUND + 1) == np.uint64(1 << 32)
    assert ll.flag_of(ll.MAX_ROUND) == np.uint64(ll.MAX_ROUND << 32)


def test_mismatched_lines_and_words_are_refused():
    with nbcoll.use_backend("numpy"), pytest.raises(ValueError, match="lines, words"):
        ll.store(np.zeros(3, np.uint64), np.zeros(2, np.uint32), round_=1)
    with nbcoll.use_backend("numpy"), pytest.raises(ValueError, match="lines: expected a 1-D array of uint64"):
        ll.rounds_of(np.zeros(3, np.uint32))


@pytest.mark.parametrize("n", [0, 1, ll.SCALAR_LINES, ll.SCALAR_LINES + 1, 257])
def test_the_rounds_kernel_reads_the_flag_half_of_every_line(backend, n):
    lines = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # every bit pattern, high and low
    got = nbcoll.to_host(ll.rounds_of(nbcoll.to_device(lines)))
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, (lines >> np.uint64(32)).astype(np.uint32))


@pytest.mark.parametrize("n", [1, 3])
def test_first_round_reads_the_flag_of_the_first_line_alone(backend, n):
    lines = np.array([(0xFFFFFFFE << 32) | 0xFFFFFFFF, 5 << 32, 6 << 32][:n], np.uint64)  # high bits on both halves
    assert ll.first_round(nbcoll.zeros(1, np.uint32), nbcoll.to_device(lines)) == 0xFFFFFFFE


def test_began_counts_later_rounds_and_wraps_around():
    assert ll.began(5, 5) and ll.began(7, 5) and not ll.began(4, 5)
    assert not ll.began(0, 1) and not ll.began(0, 2)  # a line never written: no round begun
    assert ll.began(1, ll.MAX_ROUND) and ll.began(2, ll.MAX_ROUND + 1)  # round MAX_ROUND + 1 is round 1 again
    assert not ll.began(ll.MAX_ROUND, 1)  # just before the wrap is behind, not far ahead


# -- the collectives on a loopback world -----------------------------------------------------------------------


def _inputs(rank, count, dtype):
    return ((np.arange(count) * 3 + 11 * rank) % 100).astype(dtype)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_small_one_shot_collectives_are_exact_and_use_ll(nranks):
    dtypes = [np.int8, np.int32, np.int64, np.uint64, np.float16, np.float64]
    counts = [1, 3, 5, 1000]  # a single element, odd byte counts (padded to words), several thousand bytes

    def body(comm):
        for dtype in dtypes:
            for count in counts:
                x = _inputs(comm.rank, count, dtype)
                expect = sum(_inputs(r, count, dtype) for r in range(comm.size)).astype(dtype)
                got = comm.all_reduce(x, np.zeros(count, dtype), algo="direct")
                assert np.array_equal(got, expect), (dtype, count)
                y = x.copy()  # in place
                comm.all_reduce(y, op="max", algo="direct")
                assert np.array_equal(y, np.max([_inputs(r, count, dtype) for r in range(comm.size)], axis=0))
                gathered = comm.all_gather(x, np.zeros(count * comm.size, dtype), algo="direct")
                assert np.array_equal(gathered, np.concatenate([_inputs(r, count, dtype) for r in range(comm.size)]))
                blocks = _inputs(comm.rank, count * comm.size, dtype)  # block p goes to rank p
                swapped = comm.all_to_all(blocks, np.zeros_like(blocks), algo="direct")
                mine = slice(comm.rank * count, (comm.rank + 1) * count)
                expect = np.concatenate([_inputs(r, count * comm.size, dtype)[mine] for r in range(comm.size)])
                assert np.array_equal(swapped, expect), (dtype, count)
                mine_summed = comm.reduce_scatter(blocks, np.zeros(count, dtype), algo="direct")
                summed = sum(_inputs(r, count * comm.size, dtype) for r in range(comm.size)).astype(dtype)
                assert np.array_equal(mine_summed, summed[mine]), (dtype, count)
        avg = comm.all_reduce(np.full(4, 2.0 * comm.rank), op="avg", algo="direct")
        assert np.array_equal(avg, np.full(4, comm.size - 1.0))
        ll_buffers = comm.engine._ll
        return 0 if ll_buffers is None else ll_buffers.rounds

    with nbcoll.use_backend("numpy"):
        rounds = loopback.run(nranks, body)
    calls = 6 * 4 * 5 + 1  # 6 dtypes x 4 counts x (2 all-reduces, all-gather, all-to-all, reduce-scatter), avg
    assert rounds == [0] * nranks if nranks == 1 else rounds == [calls] * nranks  # every call one LL round


def test_ll_rounds_and_window_rounds_interleave():
    """Above NBCOLL_LL_BYTES the windows take over; the two kinds of rounds never disturb each other."""

    def body(comm):
        for i in range(12):
            count = 4 if i % 3 else 40  # 16 bytes by LL, 160 through the windows
            x = np.arange(count, dtype=np.int32) + comm.rank + i
            got = comm.all_reduce(x, np.zeros_like(x), algo="direct")
            assert np.array_equal(got, sum(np.arange(count, dtype=np.int32) + r + i for r in range(comm.size)))
        return comm.engine._ll.rounds, comm.engine._windows.rounds

    with nbcoll.use_backend("numpy"):
        assert loopback.run(3, body, config=CommConfig(ll_bytes=64)) == [(8, 4)] * 3


def test_ll_off_uses_the_windows():
    with nbcoll.use_backend("numpy"):
        used = loopback.run(2, lambda c: (c.all_reduce(np.ones(2), algo="direct"), c.engine._ll)[1],
                            config=CommConfig(ll_bytes=0))  # fmt: skip
    assert used == [None, None]


def test_the_tuner_counts_one_wait_for_an_ll_round():
    from nbcoll.comm.tuner import cost_terms

    assert cost_terms("all_reduce", "direct", 64, 4, 1 << 19, window_bytes=1 << 20, ll_bytes=1 << 16)[0] == 1
    assert cost_terms("all_reduce", "direct", 1 << 17, 4, 1 << 19, window_bytes=1 << 20, ll_bytes=1 << 16)[0] == 2
    # Segments for every peer: a reduce-scatter's 16 KiB blocks on 4 ranks fill one round; without LL it is a ring.
    assert cost_terms("reduce_scatter", "direct", 16 << 10, 4, 1 << 19, window_bytes=1 << 20, ll_bytes=1 << 16)[0] == 1
    assert cost_terms("reduce_scatter", "direct", 64, 4, 1 << 19) == cost_terms(
        "reduce_scatter", "ring", 64, 4, 1 << 19
    )


def test_ll_bytes_setting_is_checked():
    with pytest.raises(ValueError, match="NBCOLL_LL_BYTES"):
        CommConfig.from_env({"NBCOLL_LL_BYTES": "12"})
    assert CommConfig.from_env({"NBCOLL_LL_BYTES": "0"}).ll_bytes == 0


def test_a_rank_that_never_writes_its_lines_times_out_naming_the_round_and_the_rank():
    def body(comm):
        comm.all_reduce(np.ones(2, np.int32), algo="direct")  # both ranks: the LL buffers exist
        if comm.rank == 1:
            return "skipped"
        comm.all_reduce(np.ones(2, np.int32), algo="direct")

    with nbcoll.use_backend("numpy"), pytest.raises(CommTimeoutError) as caught:
        loopback.run(2, body, config=CommConfig(timeout=1.0))
    message = str(caught.value)
    assert "all_reduce" in message and "rank 0" in message
    assert "ranks [1] to write their LL lines of round 2" in message, message


@pytest.mark.skipif(nbcoll.backend.device_backend() != "sim", reason="the simulator in this process (no GPU)")
def test_ll_on_the_simulator():
    def body(comm):
        x = nbcoll.to_device(np.array([comm.rank + 1, 7], np.int32))
        total = nbcoll.to_host(comm.all_reduce(x, algo="direct"))
        mine = nbcoll.to_device(np.array([comm.rank + 1], np.int32))
        gathered = nbcoll.to_host(comm.all_gather(mine, nbcoll.zeros(comm.size, np.int32), algo="direct"))
        sent = nbcoll.to_host(comm.broadcast(mine, nbcoll.zeros(1, np.int32), root=1, algo="direct"))
        return total.tolist(), gathered.tolist(), sent.tolist(), comm.engine._ll.rounds

    with nbcoll.use_backend("sim"):
        assert loopback.run(2, body) == [([3, 14], [1, 2], [2], 3)] * 2


# -- under mpiexec, over ipc -----------------------------------------------------------------------------------

MPI_CASES = """
import json, numpy as np, nbcoll
comm = nbcoll.init()
n, r = comm.size, comm.rank
ok = 0
for dtype in (np.int8, np.int32, np.int64, np.float16):
    for count in (1, 7, 4096):
        x = ((np.arange(count) + 5 * r) % 50).astype(dtype)
        want = sum(((np.arange(count) + 5 * p) % 50).astype(dtype) for p in range(n)).astype(dtype)
        assert np.array_equal(comm.all_reduce(x, np.zeros_like(x), algo="direct"), want), (dtype, count)
        got = comm.all_gather(x, np.zeros(count * n, dtype), algo="direct")
        assert np.array_equal(got, np.concatenate([((np.arange(count) + 5 * p) % 50).astype(dtype) for p in range(n)]))
        blocks = ((np.arange(count * n) + 5 * r) % 50).astype(dtype)
        got = comm.all_to_all(blocks, np.zeros_like(blocks), algo="direct")
        theirs = [((np.arange(count * n) + 5 * p) % 50).astype(dtype)[r * count : (r + 1) * count] for p in range(n)]
        assert np.array_equal(got, np.concatenate(theirs))
        got = comm.reduce_scatter(blocks, np.zeros(count, dtype), algo="direct")
        assert np.array_equal(got, sum(theirs).astype(dtype))
        got = comm.broadcast(x, np.zeros_like(x), root=count % n, algo="direct")
        assert np.array_equal(got, ((np.arange(count) + 5 * (count % n)) % 50).astype(dtype))
        ok += 5
print(json.dumps({"rank": r, "ok": ok, "rounds": comm.engine._ll.rounds}))
comm.destroy()
"""


@pytest.mark.mpi
def test_ll_under_mpiexec_over_ipc():
    result = run_ranks(3, code=MPI_CASES, env={"NBCOLL_BACKEND": "numpy"})
    reports = [json.loads(out.strip().splitlines()[-1]) for out in result.outputs]
    # 4 dtypes x 3 counts x 5 collectives; the all-to-all and reduce-scatter of 3 x 4096 int64 (96 KiB) are too
    # large for LL
    assert [rep["ok"] for rep in reports] == [60] * 3 and [rep["rounds"] for rep in reports] == [58] * 3


def _window_rounds(comm) -> int:
    return comm.engine._windows.rounds if comm.engine._windows is not None else 0  # made at the first window round


def test_direct_all_to_all_takes_ll_when_small_and_the_windows_above():
    """LL first, then the windows (a registered input read in place), on every rank alike; reduce-scatter above
    NBCOLL_LL_BYTES takes a window round too."""

    def body(comm):
        n, r = comm.size, comm.rank
        counts = []
        for count, registered in ((4, False), (40, False), (4, True), (40, True)):  # 48 B per rank by LL; 480 not
            x = comm.alloc(count * n, np.int32) if registered else np.empty(count * n, np.int32)
            x[:] = np.arange(count * n, dtype=np.int32) + 100 * r
            got = comm.all_to_all(x, np.zeros(count * n, np.int32), algo="direct")
            want = np.concatenate([np.arange(r * count, (r + 1) * count, dtype=np.int32) + 100 * p for p in range(n)])
            assert np.array_equal(got, want)
            counts.append((comm.engine._ll.rounds, _window_rounds(comm)))
        folded = comm.reduce_scatter(np.arange(40 * n, dtype=np.int32), np.zeros(40, np.int32), algo="direct")
        assert np.array_equal(folded, n * np.arange(r * 40, (r + 1) * 40, dtype=np.int32))
        counts.append((comm.engine._ll.rounds, _window_rounds(comm)))
        return counts

    with nbcoll.use_backend("numpy"):
        rounds = loopback.run(3, body, config=CommConfig(ll_bytes=64))
    assert rounds == [[(1, 0), (1, 1), (2, 1), (2, 2), (2, 3)]] * 3


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


def test_a_broadcast_root_runs_at_most_one_round_ahead_of_its_readers():
    """A root that broadcasts while its readers have stopped writes two rounds (both halves of its buffer), then
    waits for them to begin the previous round instead of overwriting lines they may still read."""

    def body(comm):
        x = np.arange(3, dtype=np.int32)
        calls = 3 if comm.rank == 0 else 1
        for _ in range(calls):
            comm.broadcast(x, root=0, algo="direct")

    with nbcoll.use_backend("numpy"), pytest.raises(CommTimeoutError) as caught:
        loopback.run(3, body, config=CommConfig(timeout=1.0))
    message = str(caught.value)
    assert "broadcast" in message and "rank 0" in message
    assert "ranks [1, 2] to begin LL round 2 before this rank writes round 3" in message, message


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


@pytest.mark.skipif(nbcoll.backend.device_backend() != "sim", reason="the simulator in this process (no GPU)")
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
