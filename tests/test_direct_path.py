"""The direct path: collectives that read their peers' registered buffers in place copy each byte once per hop.

The cases live in ``mpi_scripts/direct_path.py``: every direct collective on registered (``comm.alloc``) and plain
inputs of 0, 1 and 37 elements, with windows of 256 bytes so that a collective takes several rounds, checked
exactly and against the traffic counters: over every rank, the bytes copied per byte received are 1 on the direct
path and 2 through FIFOs. They run on loopback worlds of 1 to 4 ranks, and once under mpiexec on the ipc
transport (``/dev/shm``). LL is off here (``NBCOLL_LL_BYTES=0``): these messages are small enough for it, and it
would take them over (tests/test_ll.py covers it).
"""

import importlib.util
import os
import time
from pathlib import Path

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.algorithms import direct
from nbcoll.comm.transport import cross_memory
from nbcoll.comm.tuner import cost_terms
from nbcoll.testing import run_ranks

NO_LL = CommConfig(ll_bytes=0)


@pytest.fixture(autouse=True)
def numpy_backend(request):
    # The cases build their buffers with NumPy; the simulator case below uses the device backend itself.
    if "simulator" in request.node.name:
        yield
        return
    with nbcoll.use_backend("numpy"):
        yield


SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "direct_path.py")
_spec = importlib.util.spec_from_file_location("direct_path_cases", SCRIPT)
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_direct_collectives_are_exact_and_copy_each_byte_once_per_hop_on_loopback(nranks):
    problems = loopback.run(nranks, cases.check_rank, config=CommConfig(buffsize=256, timeout=60, ll_bytes=0))
    assert problems == [[]] * nranks


def test_a_registered_buffer_is_read_in_place_and_a_plain_one_through_the_window():
    def one_all_gather(comm, registered):
        x = comm.alloc(64, np.int32) if registered else np.zeros(64, np.int32)
        x[:] = comm.rank
        comm.reset_counters()
        y = comm.all_gather(x, np.zeros(64 * comm.size, np.int32), algo="direct")
        own = comm.counters[comm.rank].bytes_copied
        return y, own

    for registered, staged in ((True, 0), (False, 256)):  # a staged chunk is copied into the window first
        for y, own in loopback.run(3, one_all_gather, registered, config=NO_LL):
            assert np.array_equal(y, np.repeat(np.arange(3, dtype=np.int32), 64))
            assert own == 256 + staged  # this rank's own block, and the staging copy


@pytest.mark.parametrize("collective", ["all_gather", "all_to_all"])
def test_a_rank_copies_its_own_block_right_after_its_post_and_not_at_all_in_place(collective):
    """A round of a direct all-gather or all-to-all is two steps: the post, which then copies this rank's own block
    (``direct_copy_send``: a copy within the rank, not a receipt), and the read of the peers' blocks. In place the
    own block is already where it belongs, and the post copies nothing."""

    def steps_and_counts(comm, in_place):
        n, r = comm.size, comm.rank
        out = comm.alloc(64 * n, np.int32)
        out[:] = -1
        if collective == "all_gather":
            x = out[r * 64 : (r + 1) * 64] if in_place else comm.alloc(64, np.int32)
            x[:] = r
        else:
            x = out if in_place else comm.alloc(64 * n, np.int32)
            x[:] = np.repeat(np.arange(n, dtype=np.int32) + 10 * r, 64)
        comm.reset_counters()
        getattr(comm, collective)(x, out, algo="direct")
        own = comm.counters[r]
        names = [step.name for step in comm.engine.replays.kept[next(iter(comm.engine.replays.kept))].steps]
        return out.copy(), own.bytes_copied, own.bytes_received, names

    for in_place in (False, True) if collective == "all_gather" else (False,):
        for r, (out, copied, received, names) in enumerate(loopback.run(3, steps_and_counts, in_place, config=NO_LL)):
            if collective == "all_gather":
                assert np.array_equal(out, np.repeat(np.arange(3, dtype=np.int32), 64))
            else:
                assert np.array_equal(out, np.repeat(np.arange(3, dtype=np.int32) * 10 + r, 64))
            assert (copied, received) == (0 if in_place else 256, 0)
            assert names == ["direct_send" if in_place else "direct_copy_send", "direct_recv", "direct_release"]


def test_in_place_all_reduce_stages_its_registered_input_since_it_folds_over_it():
    def in_place(comm):
        x = comm.alloc(5, np.int64)
        x[:] = comm.rank + 1
        comm.all_reduce(x, algo="direct")
        return x.copy()

    for x in loopback.run(4, in_place, config=NO_LL):
        assert np.array_equal(x, np.full(5, 10))


@pytest.mark.parametrize("registered", [False, True])
def test_in_place_reduce_scatter_over_the_windows_keeps_its_own_block_until_it_is_folded(registered):
    """The output is this rank's block of the input: from rank 2 on, the folds of ranks 0 and 1 would overwrite it
    before it is folded in, so the step folds a copy of it."""

    def in_place(comm):
        n, r = comm.size, comm.rank
        x = comm.alloc(40 * n, np.int64) if registered else np.zeros(40 * n, np.int64)
        for call in range(2):
            x[:] = np.arange(40 * n) + 1000 * r + call
            mine = x[r * 40 : (r + 1) * 40]
            comm.reduce_scatter(x, mine, algo="direct")
            want = sum(np.arange(r * 40, (r + 1) * 40) + 1000 * p + call for p in range(n))
            assert np.array_equal(mine, want), (r, call)
        return comm.engine._windows.rounds

    rounds = loopback.run(4, in_place, config=CommConfig(buffsize=256, ll_bytes=0))
    assert rounds == [rounds[0]] * 4 and rounds[0] >= 4  # several window rounds per call


def test_alloc_checks_its_count_and_free_its_array():
    def misuse(comm):
        with pytest.raises(ValueError, match="count: expected a number of elements >= 0"):
            comm.alloc(-1)
        with pytest.raises(ValueError, match=r"array: not a buffer from comm.alloc\(\)"):
            comm.free(np.zeros(3))
        return True

    assert loopback.run(2, misuse) == [True, True]


def test_an_empty_registered_buffer_is_found_and_freed_although_it_has_no_address(monkeypatch):
    # numba-cuda gives every empty device array a NULL pointer, whatever it was sliced from, so on a GPU an empty
    # registration cannot be found by its address. Here the NumPy arrays are given that same NULL address.
    from nbcoll import memory

    real = memory.address_range
    monkeypatch.setattr(memory, "address_range", lambda x: (0, 0) if x.size == 0 else real(x))

    def empty_round_trip(comm):
        empty, full = comm.alloc(0, np.int64), comm.alloc(3, np.int64)
        windows = comm.engine.direct_windows()
        found = (windows.find(empty), windows.find(full), windows.find(np.zeros(0, np.int64)))
        out = comm.all_gather(empty, np.zeros(0, np.int64), algo="direct")
        comm.free(empty)
        with pytest.raises(ValueError, match="freed already"):
            comm.free(empty)
        comm.free(full)
        return found, out.size

    assert loopback.run(2, empty_round_trip, config=NO_LL) == [(((0, 0), (1, 0), None), 0)] * 2


def test_tuner_knows_the_direct_broadcast_and_all_to_all():
    window = 4 << 20
    # At 2 ranks a broadcast goes in pieces of 1 MiB, here four: two waits in the first round, one in each later round
    # (its post waits for the round before last, long done); the root stages a piece while the readers copy the one
    # before. From 3 ranks on its pieces are 4 MiB, or half the window if that is less (direct.broadcast_piece_bytes):
    # one round in an 8 MiB window, two in a 4 MiB one. An all-gather's pieces are 2 MiB.
    assert cost_terms("broadcast", "direct", 4 << 20, 2, 1 << 19, window_bytes=window) == (5, (4 << 20) + (1 << 20))
    assert cost_terms("broadcast", "direct", 4 << 20, 4, 1 << 19, window_bytes=2 * window) == (2, 8 << 20)
    assert cost_terms("broadcast", "direct", 4 << 20, 4, 1 << 19, window_bytes=window) == (3, 6 << 20)
    assert cost_terms("all_gather", "direct", 4 << 20, 4, 1 << 19, window_bytes=window)[0] == 3  # 2 MiB pieces
    assert cost_terms("broadcast", "direct", 64 << 10, 4, 1 << 19, window_bytes=window) == (2, 2 * (64 << 10))
    small_window = cost_terms("broadcast", "direct", 1 << 20, 4, 1 << 19, window_bytes=256 << 10)
    assert small_window == (9, (1 << 20) + (128 << 10))  # pieces of half the window
    steps, _ = cost_terms("all_to_all", "direct", 1 << 20, 4, 1 << 19, window_bytes=window)
    assert steps == 3  # two rounds: four blocks of 512 KiB fill half the window


def test_an_all_gather_takes_pieces_twice_the_size_of_a_broadcast():
    # 4 MiB through 4 MiB windows: a broadcast in four rounds of 1 MiB, an all-gather's 2 MiB block (2 ranks) in
    # one round of 2 MiB, as direct.BROADCAST_PIECE_BYTES and direct.GATHER_PIECE_BYTES say; and the results are
    # exact.
    def rounds_of(comm):
        windows, counts = comm.engine.direct_windows(), []
        x = np.arange(1 << 20, dtype=np.float32) + comm.rank
        before = windows.rounds
        comm.broadcast(x, root=0, algo="direct")
        counts.append(windows.rounds - before)
        out, before = np.zeros(1 << 20, np.float32), windows.rounds
        comm.all_gather(x[: 1 << 19], out, algo="direct")
        counts.append(windows.rounds - before)
        expected = np.concatenate([np.arange(1 << 19, dtype=np.float32)] * 2)
        return counts, bool(np.array_equal(x, np.arange(1 << 20, dtype=np.float32)) and np.array_equal(out, expected))

    config = CommConfig(buffsize=4 << 20, ll_bytes=0)
    assert loopback.run(2, rounds_of, config=config) == [([4, 1], True)] * 2


def test_a_window_holds_a_buffsize_for_every_two_ranks_so_an_all_to_all_keeps_its_pieces():
    # 4 ranks, NBCOLL_BUFFSIZE of 4 MiB: windows of 8 MiB (direct.window_bytes). An all-to-all of 2 MiB blocks goes
    # in two rounds of 1 MiB pieces (four of them fill half the window); a reduce-scatter of the same blocks in four
    # rounds of 512 KiB, its round kept to direct.FOLD_ROUND_BYTES; and the results are exact.
    block = 1 << 19  # float32: 2 MiB

    def rounds_of(comm):
        windows, counts, n = comm.engine.direct_windows(), [], comm.size
        x = (np.arange(n * block) % 1000 + comm.rank).astype(np.float32)
        out, before = np.zeros(n * block, np.float32), windows.rounds
        comm.all_to_all(x, out, algo="direct")
        counts.append(windows.rounds - before)
        exchanged = np.concatenate([(np.arange(comm.rank * block, (comm.rank + 1) * block) % 1000 + p)
                                    for p in range(n)]).astype(np.float32)  # fmt: skip
        folded, before = np.zeros(block, np.float32), windows.rounds
        comm.reduce_scatter(x, folded, algo="direct")
        counts.append(windows.rounds - before)
        summed = n * (np.arange(comm.rank * block, (comm.rank + 1) * block) % 1000) + n * (n - 1) // 2
        exact = np.array_equal(out, exchanged) and np.array_equal(folded, summed.astype(np.float32))
        return windows.nbytes, counts, bool(exact)

    config = CommConfig(buffsize=4 << 20, ll_bytes=0)
    assert loopback.run(4, rounds_of, config=config) == [(8 << 20, [2, 4], True)] * 4


def _siblings_may_read_each_other() -> bool:
    """Whether two ranks of one mpiexec may read each other's memory (process_vm_readv): Yama's ptrace_scope above
    0 forbids it between processes that are not parent and child."""
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    return cross_memory.available() and (not scope.exists() or scope.read_text().strip() == "0")


@pytest.mark.mpi
def test_direct_path_under_mpiexec_on_ipc():
    # Plain inputs from 16 bytes go by address (NBCOLL_CMA_BYTES): read out of the owner's process by the kernel.
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_BUFFSIZE": "256", "NBCOLL_TIMEOUT": "60", "NBCOLL_LL_BYTES": "0",
           "NBCOLL_CMA_BYTES": "16"}  # fmt: skip
    result = run_ranks(3, SCRIPT, env=env, timeout=300)
    for out in result.outputs:
        assert "direct path ok" in out, result.report()
        if _siblings_may_read_each_other():  # else the windows found out at set-up, and staged (also checked)
            assert "read by address: True" in out, result.report()
    assert "direct/registered 1.0, ring/registered 2.0" in result.outputs[0], result.report()


@pytest.mark.parametrize(("ll_bytes", "cma_bytes"), [(0, 0), (64 << 10, 0), (0, 8)])
def test_one_shot_collectives_in_flight_together_number_their_rounds_alike(ll_bytes, cma_bytes):
    # Several rounds each (windows of 256 bytes), issued without waiting and in a group: every rank may take the
    # steps of the two collectives in another order, but each round means the same chunk on every rank. With LL
    # on, the all-gathers and the all-reduce are LL rounds and the broadcast a window round.
    def overlapping(comm):
        n, r = comm.size, comm.rank
        x = comm.alloc(100, np.int64) if not cma_bytes else np.empty(100, np.int64)  # plain: lent by address
        x[:] = np.arange(100) + 1000 * r
        gathered, summed = np.zeros(100 * n, np.int64), np.zeros(100, np.int64)
        written = comm.alloc(100, np.int64)  # registered: the root writes its share of each chunk into it
        written[:] = 0
        works = [comm.all_gather(x, gathered, algo="direct", async_op=True)]
        works.append(comm.all_reduce(np.arange(100) * (r + 1), summed, algo="direct", async_op=True))
        for work in works:
            work.wait()
        with comm.group():
            again = comm.all_gather(np.arange(100) + 1000 * r, np.zeros(100 * n, np.int64), algo="direct")
            bcast = comm.broadcast(x, written, root=0, algo="direct")
        return gathered, summed, again, bcast.copy()

    n = 3
    # cma_bytes 8: the plain inputs of the all-gathers and the broadcast are lent by address, one after the other
    config = CommConfig(buffsize=256, timeout=60, ll_bytes=ll_bytes, cma_bytes=cma_bytes)
    for gathered, summed, again, bcast in loopback.run(n, overlapping, config=config):
        expected = np.concatenate([np.arange(100) + 1000 * p for p in range(n)])
        assert np.array_equal(gathered, expected) and np.array_equal(again, expected)
        assert np.array_equal(summed, np.arange(100) * sum(range(1, n + 1)))
        assert np.array_equal(bcast, np.arange(100))


@pytest.mark.parametrize("registered", [False, True])
def test_an_all_gather_and_an_all_to_all_in_flight_together_copy_their_own_blocks_at_uneven_sizes(registered):
    # Each round's post copies the rank's own block (direct_copy_send); with the other collective's rounds taken in
    # between, every block still lands once and exactly, at 0, 1 and 37 elements a block on 3 ranks.
    def both(comm):
        n, r, results = comm.size, comm.rank, []
        for count in (0, 1, 37):
            x = comm.alloc(count, np.int64) if registered and count else np.empty(count, np.int64)
            x[:] = np.arange(count) + 1000 * r
            gathered, exchanged = np.full(count * n, -1, np.int64), np.full(count * n, -1, np.int64)
            works = [comm.all_gather(x, gathered, algo="direct", async_op=True)]
            works.append(comm.all_to_all(np.arange(count * n) + 100000 * r, exchanged, algo="direct", async_op=True))
            for work in works[::-1]:
                work.wait()
            results.append((count, gathered, exchanged))
        return results

    for r, results in enumerate(loopback.run(3, both, config=CommConfig(buffsize=256, timeout=60, ll_bytes=0))):
        for count, gathered, exchanged in results:
            assert np.array_equal(gathered, np.concatenate([np.arange(count) + 1000 * p for p in range(3)]))
            want = np.concatenate([np.arange(r * count, (r + 1) * count) + 100000 * p for p in range(3)])
            assert np.array_equal(exchanged, want)


def test_registered_direct_collectives_on_the_simulator():
    # A few elements only: every copy and fold is a simulated kernel launch over the lent memory.
    import nbcoll
    from nbcoll.backend import device_backend

    if device_backend() != "sim":
        pytest.skip("the loopback world runs on numpy and sim")

    def body(comm):
        n, r = comm.size, comm.rank
        x = comm.alloc(3, np.int64)
        x[:] = nbcoll.to_device(np.arange(3, dtype=np.int64) + 10 * r)
        gathered, summed = nbcoll.zeros(3 * n, np.int64), nbcoll.zeros(3, np.int64)
        comm.all_gather(x, gathered, algo="direct")
        comm.all_reduce(x, summed, algo="direct")
        blocks = comm.alloc(2 * n, np.int64)  # block p of every rank is folded on rank p
        blocks[:] = nbcoll.to_device(np.arange(2 * n, dtype=np.int64) + 10 * r)
        mine = nbcoll.zeros(2, np.int64)
        comm.reduce_scatter(blocks, mine, algo="direct")
        written = comm.alloc(3, np.int64)  # registered: the root writes the last element into it
        comm.broadcast(x, written, root=1, algo="direct")
        return nbcoll.to_host(gathered), nbcoll.to_host(summed), nbcoll.to_host(mine), nbcoll.to_host(written)

    with nbcoll.use_backend("sim"):
        outs = loopback.run(2, body, config=NO_LL)
    for rank, (gathered, summed, mine, written) in enumerate(outs):
        assert gathered.tolist() == [0, 1, 2, 10, 11, 12] and summed.tolist() == [10, 12, 14]
        assert written.tolist() == [10, 11, 12]
        assert mine.tolist() == [4 * rank + 10, 4 * rank + 12]  # (2r + i) + (2r + i + 10) for i = 0, 1


def test_staged_rounds_in_the_window_halves_on_the_simulator():
    """Plain buffers of 5 int64 over windows of 32 bytes: rounds of 2 elements in the two 16-byte halves taken in
    turn (3 rounds, the last of one element), read and written at an offset of the device window on the
    simulator."""
    import nbcoll
    from nbcoll.backend import device_backend

    if device_backend() != "sim":
        pytest.skip("the loopback world runs on numpy and sim")

    def body(comm):
        n, r = comm.size, comm.rank
        x = nbcoll.to_device(np.arange(5, dtype=np.int64) + 10 * r)
        gathered, summed = nbcoll.zeros(5 * n, np.int64), nbcoll.zeros(5, np.int64)
        comm.all_gather(x, gathered, algo="direct")
        comm.all_reduce(x, summed, algo="direct")
        comm.broadcast(x, root=1, algo="direct")
        return nbcoll.to_host(gathered), nbcoll.to_host(summed), nbcoll.to_host(x)

    with nbcoll.use_backend("sim"):
        outs = loopback.run(2, body, config=CommConfig(buffsize=32, steps=2, ll_bytes=0, timeout=60))
    for gathered, summed, bcast in outs:
        assert gathered.tolist() == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
        assert summed.tolist() == [10, 12, 14, 16, 18] and bcast.tolist() == [10, 11, 12, 13, 14]


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_broadcast_into_registered_outputs_shares_the_copies_with_the_root_call_after_call(nranks):
    """In place on registered buffers (a training loop's parameters): every reader opens its output, so the root
    writes 1/n of each round's chunk and each reader copies the rest. Replayed calls keep both exact."""

    def loop(comm):
        n, r = comm.size, comm.rank
        x = comm.alloc(100, np.int64)
        copied = []
        for call in range(3):
            x[:] = np.arange(100) * (call + 1) if r == n - 1 else -1
            comm.reset_counters()
            comm.broadcast(x, root=n - 1, algo="direct")
            assert np.array_equal(x, np.arange(100) * (call + 1)), (r, call)
            copied.append(sum(comm.counters[p].bytes_copied for p in comm.counters.peers if p != r))
        return copied, comm.engine.replays.hits

    share = cases._root_share(100, nranks, 256 // 16)  # windows of 256 bytes: rounds of half, 16 int64, 7 rounds
    outs = loopback.run(nranks, loop, config=CommConfig(buffsize=256, timeout=60, ll_bytes=0))
    for rank, (copied, hits) in enumerate(outs):
        want = (nranks - 1) * share * 8 if rank == nranks - 1 else (100 - share) * 8
        assert copied == [want] * 3, (rank, copied, want)
        assert hits == 2  # the second and third calls replayed the first one's steps


@pytest.mark.parametrize("collective", ["broadcast", "all_gather"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_a_rank_stages_its_next_piece_while_its_peers_read_the_last(monkeypatch, nranks, collective):
    """A plain buffer's rounds take the window's two halves in turn, so a rank posts round ``k + 1`` before its
    peers are done reading round ``k``. The last rank, inside its copy of the first round, waits for every
    source's next post; were every round staged in the same bytes, the sources would wait for that copy instead,
    the reader would time out here, and the results would still be exact. Were the halves not taken in turn, the
    next post would overwrite what the reader is about to copy, and the results would be wrong."""
    from nbcoll.comm import window_step

    original, seen, root = window_step.WindowStep.run, [], 0
    rounds = -(-100 // (direct.window_bytes(256, nranks) // 16))  # 100 int64 in halves of the window

    def copy_once_the_next_round_is_posted(step):
        if step.name == "direct_recv" and step.w.rank == nranks - 1 and step.round == step.w.rounds - rounds + 1:
            deadline = time.monotonic() + 10.0  # far longer than a posted round takes; bounded all the same
            while min(step.w.posted[p] for p in step.sources) <= step.round and time.monotonic() < deadline:
                time.sleep(0.001)
            seen.append((step.w.rank, min(int(step.w.posted[p]) for p in step.sources) - step.round))
        original(step)

    monkeypatch.setattr(window_step.WindowStep, "run", copy_once_the_next_round_is_posted)

    def one_call(comm):  # 100 int64 a rank, in several rounds; the reader waits in the first
        if collective == "broadcast":
            x = np.arange(100, dtype=np.int64) if comm.rank == root else np.full(100, -1, np.int64)
            comm.broadcast(x, root=root, algo="direct")
            return x
        out = np.zeros(100 * comm.size, np.int64)
        comm.all_gather(np.arange(100, dtype=np.int64) + 100 * comm.rank, out, algo="direct")
        return out

    outs = loopback.run(nranks, one_call, config=CommConfig(buffsize=256, timeout=60, ll_bytes=0))
    want = np.arange(100 if collective == "broadcast" else 100 * nranks)
    assert all(np.array_equal(out, want) for out in outs)
    assert seen == [(nranks - 1, 1)]
