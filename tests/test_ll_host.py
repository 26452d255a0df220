"""The numpy backend's compiled LL write and poll (nbcoll.kernels.ll_host, NBCOLL_LL_COMPILED=1): the same lines as
the kernels' references, each source polled on its own, the last line looked at first, indexes checked; the write in
streaming stores (NBCOLL_STREAM_SHARED_BYTES) too; and every LL collective giving the same results and the same
traffic counters through them, compiled or streamed, as through the references."""

import dataclasses

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.errors import CommTimeoutError
from nbcoll.kernels import ll, ll_host, stream_copy

needs_x86 = pytest.mark.skipif(not stream_copy.available(), reason="streaming stores are x86-64's")
LATE_ROUND = ll.MAX_ROUND - 1  # its lines' high half is past the largest int64: the unsigned path


def _words(n, seed=0):
    return ((np.arange(n, dtype=np.uint64) + seed) * 2654435761 % (1 << 32)).astype(np.uint32)  # high bits too


@pytest.mark.parametrize("round_", [7, LATE_ROUND])
@pytest.mark.parametrize("n", [0, 1, 5, 257])
def test_write_stores_each_segment_as_the_reference_does(n, round_):
    words = _words(3 * n + 2)
    lines = np.zeros(2 * n + 4, np.uint64)
    ll_host.write(lines, np.array([1, n + 3]), words, np.array([2, 2 * n + 2]), n, ll.wrapped(round_))
    expected = np.zeros_like(lines)
    ll.store_reference(expected[1 : n + 1], words[2 : n + 2], ll.flag_of(round_))
    ll.store_reference(expected[n + 3 : 2 * n + 3], words[2 * n + 2 : 3 * n + 2], ll.flag_of(round_))
    np.testing.assert_array_equal(lines, expected)


@pytest.mark.parametrize("round_", [7, LATE_ROUND])
@pytest.mark.parametrize("n", [0, 1, 5, 257])
def test_poll_copies_a_complete_source_where_it_goes_and_counts_the_others(n, round_):
    flag, high = ll.wrapped(round_), ll.flag_of(round_)
    written, stale = np.zeros(n + 3, np.uint64), np.zeros(n + 3, np.uint64)
    ll.store_reference(written[3:], _words(n), high)
    ll.store_reference(stale[3:], _words(n, seed=9), ll.flag_of(round_ - 1))  # the round before
    out = np.full(2 * n + 1, 77, np.uint32)
    complete = np.zeros(2, np.int64)
    late = ll_host.poll((written, stale), 3, n, flag, complete, round_, (out, out), np.array([1, n + 1]))
    assert late == (1 if n else 0)  # a round of no lines is complete at once
    np.testing.assert_array_equal(out[1 : n + 1], _words(n))
    assert complete.tolist() == [round_, round_ if not n else 0]
    np.testing.assert_array_equal(out[n + 1 :], 77)  # an incomplete source's words are not copied

    ll.store_reference(stale[3:], _words(n, seed=9), high)  # its writer catches up
    out[: n + 1] = 0  # a source already complete is not read again
    assert ll_host.poll((written, stale), 3, n, flag, complete, round_, (out, out), np.array([1, n + 1])) == 0
    np.testing.assert_array_equal(out[1 : n + 1], 0)
    np.testing.assert_array_equal(out[n + 1 :], _words(n, seed=9))
    assert complete.tolist() == [round_, round_]


def test_poll_looks_at_the_last_line_first_and_still_checks_every_line():
    words, flag = _words(6), ll.flag_of(4)
    lines = np.zeros(6, np.uint64)
    ll.store_reference(lines[:5], words[:5], flag)  # a writer on a CPU, one line short
    complete, out = np.zeros(1, np.int64), np.zeros(6, np.uint32)
    assert ll_host.poll((lines,), 0, 6, 4, complete, 4, (out,), np.array([0])) == 1
    ll.store_reference(lines, words, flag)
    ll.store_reference(lines[2:3], words[2:3], ll.flag_of(3))  # lines landing in any order, as a GPU's may
    assert ll_host.poll((lines,), 0, 6, 4, complete, 4, (out,), np.array([0])) == 1
    assert not out.any() and complete[0] == 0
    ll.store_reference(lines, words, flag)
    assert ll_host.poll((lines,), 0, 6, 4, complete, 4, (out,), np.array([0])) == 0
    np.testing.assert_array_equal(out, words)


@needs_x86
@pytest.mark.parametrize("round_", [7, LATE_ROUND])
@pytest.mark.parametrize("n", [0, 1, 5, 257])
def test_streaming_stores_write_the_lines_the_reference_writes(n, round_):
    words = _words(3 * n + 2)
    lines, expected = np.zeros(2 * n + 4, np.uint64), np.zeros(2 * n + 4, np.uint64)
    ll_host.write(lines, np.array([1, n + 3]), words, np.array([2, 2 * n + 2]), n, ll.wrapped(round_), True)
    ll.store_reference(expected[1 : n + 1], words[2 : n + 2], ll.flag_of(round_))
    ll.store_reference(expected[n + 3 : 2 * n + 3], words[2 * n + 2 : 3 * n + 2], ll.flag_of(round_))
    np.testing.assert_array_equal(lines, expected)  # the lines around the segments are untouched too
    lines[:], expected[:] = 0, 0
    ll_host.stream_store(lines[1 : n + 1], words[2 : n + 2], ll.flag_of(round_))
    ll.store_reference(expected[1 : n + 1], words[2 : n + 2], ll.flag_of(round_))
    np.testing.assert_array_equal(lines, expected)


@needs_x86
def test_a_streamed_segment_past_the_lines_or_the_words_raises_before_a_line_is_written():
    lines, words = np.zeros(4, np.uint64), _words(4)
    for line_at, word_at in ((2, 0), (0, 1), (-1, 0)):
        with pytest.raises(IndexError, match="a segment past the lines or the words"):
            ll_host.write(lines, np.array([line_at]), words, np.array([word_at]), 4, 1, True)
    with pytest.raises(IndexError):
        ll_host.stream_store(lines, words[:3], ll.flag_of(1))  # one word short
    assert not lines.any()


def test_copy_moves_words_and_an_index_past_an_array_raises_instead_of_writing_past_it():
    src, dest = _words(5), np.zeros(8, np.uint32)
    ll_host.copy(dest, 3, src, 0, 5)
    np.testing.assert_array_equal(dest[3:], src)
    lines = np.zeros(4, np.uint64)
    with pytest.raises(IndexError):
        ll_host.write(lines, np.array([2]), src, np.array([0]), 4, 1)
    with pytest.raises(IndexError):
        ll_host.poll((np.zeros(4, np.uint64),), 0, 4, 0, np.zeros(1, np.int64), 1, (dest,), np.array([6]))  # flag 0
    with pytest.raises(IndexError):
        ll_host.copy(dest, 6, src, 0, 5)


def _every_ll_collective(comm):
    """Every LL collective on odd sizes of whole-word and staged dtypes, in and out of place; the results and the
    counters."""
    r, n = comm.rank, comm.size
    results = []
    for dtype in (np.int8, np.float16, np.int32, np.float64):
        for count in (1, 3, 5):
            x = ((np.arange(count) * 7 + 3 * r) % 50).astype(dtype)
            blocks = ((np.arange(count * n) * 5 + r) % 50).astype(dtype)
            for _ in range(2):  # the second call is a replay of the first
                results.append(comm.all_reduce(x, np.zeros(count, dtype), algo="direct").copy())
                results.append(comm.all_gather(x, np.zeros(count * n, dtype), algo="direct").copy())
                results.append(comm.all_to_all(blocks, np.zeros_like(blocks), algo="direct").copy())
                results.append(comm.reduce_scatter(blocks, np.zeros(count, dtype), algo="direct").copy())
                results.append(comm.broadcast(x.copy(), root=n - 1, algo="direct").copy())
            in_place = np.zeros(count * n, dtype)
            in_place[r * count : (r + 1) * count] = x
            results.append(comm.all_gather(in_place[r * count : (r + 1) * count], in_place, algo="direct"))
    counters = comm.counters
    kept_in, kept_out = np.ones(3, np.int32), np.zeros(3 * n, np.int32)
    comm.all_gather(kept_in, kept_out, algo="direct")  # a plan kept while its buffers live: which path its steps take
    steps = [step for kept in comm.engine.replays.kept.values() for step in kept.steps]
    paths = {(step.compiled, step.store_lines is ll_host.stream_store) for step in steps}
    return results, [counters[p] for p in counters.peers], comm.engine._ll.rounds, paths


@pytest.mark.parametrize("nranks", [2, 3, 4])
@pytest.mark.parametrize("compiled, streams", [(True, False), (True, True), (False, True)])
def test_every_ll_collective_gives_the_same_results_and_counters_compiled_or_streamed_as_through_the_references(
    nranks, compiled, streams
):
    plain = CommConfig(timeout=20.0, stream_shared_bytes=0)
    tried = dataclasses.replace(plain, ll_compiled=compiled, stream_shared_bytes=8 if streams else 0)
    with nbcoll.use_backend("numpy"):
        outcomes = loopback.run(nranks, _every_ll_collective, config=tried)
        references = loopback.run(nranks, _every_ll_collective, config=plain)
    streamed = streams and stream_copy.available()  # compiled, the data stream inside ll_host.write
    for rank, ((got, counters, rounds, paths), (want, want_counters, want_rounds, want_paths)) in enumerate(
        zip(outcomes, references, strict=True)
    ):
        assert paths == {(compiled, streamed)} and want_paths == {(False, False)}, rank
        assert rounds == want_rounds > 0, rank
        assert counters == want_counters, rank
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), (rank, a, b)


def test_the_setting_is_read_once_and_is_off_by_default():
    assert CommConfig.from_env({}).ll_compiled is False
    assert CommConfig.from_env({"NBCOLL_LL_COMPILED": "1"}).ll_compiled is True


@pytest.mark.simulator
def test_the_setting_changes_nothing_off_the_numpy_backend():
    def body(comm):
        mine = nbcoll.to_device(np.full(2, comm.rank, np.int32))
        out = comm.all_gather(mine, nbcoll.zeros(4, np.int32), algo="direct")
        return nbcoll.to_host(out).tolist(), comm.engine._ll.compiled

    with nbcoll.use_backend("sim"):
        results = loopback.run(2, body, config=CommConfig(timeout=60.0, ll_compiled=True))
    assert results == [([0, 0, 1, 1], False)] * 2


@pytest.mark.parametrize("torn", [False, True])
def test_a_peer_that_writes_none_or_half_of_its_lines_times_out_and_leaves_its_block_untouched(torn):
    """Compiled, as through the references: a peer that never writes its lines of the round, or stops halfway, makes
    this rank time out naming the round and the peer, and no word of that peer lands in the output."""
    outputs = {}

    def body(comm):
        comm.all_gather(np.ones(1, np.int32), np.zeros(2, np.int32), algo="direct")  # round 1: the buffers exist
        if comm.rank == 1:
            if torn:  # the first 20 of its 40 lines of round 2, then nothing
                ll_buffers = comm.engine._ll
                ll.store(ll_buffers.lines(1, 2, 0, 20), np.arange(20, dtype=np.uint32), round_=2)
            return "stopped"
        out = outputs[0] = np.full(80, -1, np.int32)
        comm.all_gather(np.arange(40, dtype=np.int32), out, algo="direct")

    with nbcoll.use_backend("numpy"), pytest.raises(CommTimeoutError) as caught:
        loopback.run(2, body, config=CommConfig(timeout=1.0, ll_compiled=True))
    assert "ranks [1] to write their LL lines of round 2" in str(caught.value), caught.value
    np.testing.assert_array_equal(outputs[0][:40], np.arange(40))  # its own block, copied before the poll
    np.testing.assert_array_equal(outputs[0][40:], -1)  # nothing of the peer's
