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


def test_an_ll_round_is_one_step_that_writes_and_copies_its_own_block_before_its_peers_have_written():
    """An LL all-gather's round is one step: it writes this rank's lines, copies its own block, then polls. Rank 1
    calls only once rank 0's own block has landed in its output, which rank 0 can only have done before its poll
    succeeds. In place, there is nothing to copy, and no byte of it is counted. An all-reduce's round is one step
    too."""
    import time

    outputs = {}

    def body(comm):
        r, n = comm.rank, comm.size
        comm.all_gather(np.zeros(1, np.int32), np.zeros(n, np.int32), algo="direct")  # round 1: the LL buffers exist
        x = np.full(3, 10 + r, np.int32)
        out = outputs[r] = np.zeros(3 * n, np.int32)
        if r == 1:
            deadline = time.monotonic() + 5.0
            while 0 not in outputs or outputs[0][0] != 10:  # rank 0 is inside its call, polling for our lines
                assert time.monotonic() < deadline, "rank 0 never copied its own block before the poll"
                time.sleep(0.001)
        copied = comm.counters[r].bytes_copied
        got = comm.all_gather(x, out, algo="direct").tolist()
        own_copied = comm.counters[r].bytes_copied - copied
        comm.all_gather(x, out, algo="direct")  # the plan is kept: its steps are the replay's
        (replay,) = [k for k in comm.engine.replays.kept.values() if k.name == "all_gather"]
        in_place = np.zeros(3 * n, np.int32)
        in_place[3 * r : 3 * r + 3] = 20 + r
        copied = comm.counters[r].bytes_copied
        comm.all_gather(in_place[3 * r : 3 * r + 3], in_place, algo="direct")
        in_place_copied = comm.counters[r].bytes_copied - copied
        blocks = np.arange(2 * n, dtype=np.int32) + 100 * r  # block p (2 elements) goes to rank p
        swapped = comm.all_to_all(blocks, np.zeros_like(blocks), algo="direct")
        mine, total = np.full(2, r, np.int32), np.zeros(2, np.int32)
        for _ in range(2):  # the second call replays the first one's steps
            comm.all_reduce(mine, total, algo="direct")
        (kept,) = [k for k in comm.engine.replays.kept.values() if k.name == "all_reduce"]
        assert total.tolist() == [n * (n - 1) // 2] * 2
        assert [step.name for step in kept.steps] == ["ll_send_recv_reduce_copy"]
        return (
            got,
            own_copied,
            [step.name for step in replay.steps],
            in_place.tolist(),
            in_place_copied,
            swapped.tolist(),
        )

    with nbcoll.use_backend("numpy"):
        results = loopback.run(3, body, config=CommConfig(timeout=10.0))
    for r, (got, own_copied, steps, in_place, in_place_copied, swapped) in enumerate(results):
        assert got == [10, 10, 10, 11, 11, 11, 12, 12, 12]
        assert own_copied == 12 + 12 and steps == ["ll_send_recv"]  # into its lines, and its own block
        assert in_place == [20, 20, 20, 21, 21, 21, 22, 22, 22] and in_place_copied == 12  # into its lines only
        assert swapped == [100 * p + 2 * r + i for p in range(3) for i in range(2)]


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


def test_ll_is_off_by_default_on_a_gpu_only(monkeypatch):
    # On cuda an LL poll is a kernel launch and a copy back: the window path was faster there (measured on an H200).
    from nbcoll import backend

    for name, default in (("numpy", 64 << 10), ("sim", 64 << 10), ("cuda", 0)):
        monkeypatch.setattr(backend, "get_backend", lambda name=name: name)
        assert CommConfig().ll_bytes == CommConfig.from_env({}).ll_bytes == default, name
    assert CommConfig.from_env({"NBCOLL_LL_BYTES": "4096"}).ll_bytes == 4096  # a setting still turns it on


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


@pytest.mark.simulator
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
