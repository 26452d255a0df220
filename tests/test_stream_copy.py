"""Streaming copies: the ``numpy`` backend's copy into a large collective's output, around the caches.

The compiled copy against its reference at every alignment and at sizes around its 32-byte lines (0 and 1
included); the collectives with ``NBCOLL_STREAM_BYTES`` at 8 bytes, so that every output streams, on 1 to 4
loopback ranks: exact results and each byte still copied once per hop (the cases of
``mpi_scripts/direct_path.py``); the copies into FIFO slots and windows, which stream from their own threshold
(``NBCOLL_STREAM_SHARED_BYTES``); and the settings themselves.
"""

import dataclasses
import importlib.util
import os

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, CommError, loopback
from nbcoll.kernels import stream_copy

needs_x86 = pytest.mark.skipif(not stream_copy.available(), reason="streaming stores are x86-64's")

SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "direct_path.py")
_spec = importlib.util.spec_from_file_location("direct_path_cases", SCRIPT)
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

STREAM_EVERY_OUTPUT = CommConfig(buffsize=256, timeout=60, ll_bytes=0, stream_bytes=8)


@needs_x86
@pytest.mark.parametrize("nbytes", [0, 1, 31, 32, 33, 64, 95, 1000, 4099])
@pytest.mark.parametrize("dst_at", [0, 1, 8, 31])
def test_the_copy_equals_its_reference_at_every_alignment(nbytes, dst_at):
    rng = np.random.default_rng(nbytes + dst_at)
    src = rng.integers(0, 256, nbytes + 40, dtype=np.uint8)
    dst, expected = np.zeros(nbytes + 80, np.uint8), np.zeros(nbytes + 80, np.uint8)
    stream_copy.copy(dst[dst_at : dst_at + nbytes], src[3 : 3 + nbytes])
    stream_copy.copy_reference(expected[dst_at : dst_at + nbytes], src[3 : 3 + nbytes])
    assert np.array_equal(dst, expected)  # the bytes around the destination are untouched too


@needs_x86
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float64])
def test_the_copy_takes_any_dtype_and_a_read_only_source(dtype):
    src = np.arange(257, dtype=dtype)
    src.flags.writeable = False
    dst = np.zeros(257, dtype)
    assert stream_copy.copy(dst, src) is dst
    assert np.array_equal(dst, src)


@needs_x86
def test_two_sizes_are_refused_before_a_byte_is_written():
    dst = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match="dst and src differ in size"):
        stream_copy.copy(dst, np.ones(65, np.uint8))
    assert not dst.any()


@needs_x86
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_collectives_that_stream_every_output_are_exact_and_copy_once_per_hop(monkeypatch, nranks):
    streamed = []
    original = stream_copy.copy

    def counted(dst, src):
        streamed.append(dst.nbytes)
        return original(dst, src)

    monkeypatch.setattr(stream_copy, "copy", counted)
    with nbcoll.use_backend("numpy"):
        problems = loopback.run(nranks, cases.check_rank, config=STREAM_EVERY_OUTPUT)
    assert problems == [[]] * nranks
    assert sum(streamed) > 0  # the direct copies into outputs went through the streaming copy


def test_streamed_collectives_in_flight_together_at_uneven_sizes_are_exact():
    # Three ranks, blocks of 0, 1 and 37 elements: an all-gather, an all-to-all and a broadcast into a registered
    # output (the root writes its share into it) issued without waiting, every output streamed, many rounds each.
    def in_flight(comm):
        n, r, results = comm.size, comm.rank, []
        for count in (0, 1, 37):
            x = comm.alloc(count, np.int64) if count else np.empty(0, np.int64)
            x[:] = np.arange(count) + 1000 * r
            gathered, exchanged = np.full(count * n, -1, np.int64), np.full(count * n, -1, np.int64)
            written = comm.alloc(count, np.int64) if count else np.empty(0, np.int64)
            written[:] = -1
            works = [comm.all_gather(x, gathered, algo="direct", async_op=True),
                     comm.all_to_all(np.arange(count * n) + 100000 * r, exchanged, algo="direct", async_op=True),
                     comm.broadcast(x, written, root=2, algo="direct", async_op=True)]  # fmt: skip
            for work in works[::-1]:
                work.wait()
            results.append((count, gathered, exchanged, written.copy()))
        return results

    with nbcoll.use_backend("numpy"):
        outcomes = loopback.run(3, in_flight, config=STREAM_EVERY_OUTPUT)
    for r, results in enumerate(outcomes):
        for count, gathered, exchanged, written in results:
            assert np.array_equal(gathered, np.concatenate([np.arange(count) + 1000 * p for p in range(3)]))
            want = np.concatenate([np.arange(r * count, (r + 1) * count) + 100000 * p for p in range(3)])
            assert np.array_equal(exchanged, want)
            assert np.array_equal(written, np.arange(count) + 2000)


def test_a_read_only_output_on_one_rank_is_refused_there_and_no_peer_block_is_read_elsewhere():
    def body(comm):
        r = comm.rank
        x, y = np.arange(40, dtype=np.int64) + 1000 * r, np.zeros(40 * comm.size, np.int64)
        comm.all_gather(x, y, algo="direct")  # streamed, then replayed below
        if r == 1:
            y.flags.writeable = False
        before = y.copy()
        x += 1
        try:
            comm.all_gather(x, y, algo="direct")
        except ValueError as exc:
            assert r == 1 and "is read-only" in str(exc), exc
            return "refused"
        except CommError:  # the others learn of the refusal instead of reading what rank 1 never posted
            # Only a rank's own block may have landed: it copies that while the peers' posts are on their way
            # (direct_copy_send); no block of a peer's is read from a call that a peer refused.
            peers = np.arange(y.size) // 40 != r
            assert np.array_equal(y[peers], before[peers]), "a peer's block was read although a peer refused the call"
            return "told"
        return "returned"

    with nbcoll.use_backend("numpy"):
        outcomes = loopback.run(3, body, config=dataclasses.replace(STREAM_EVERY_OUTPUT, timeout=20.0))
    assert outcomes == ["told", "refused", "told"], outcomes


def test_small_outputs_and_other_backends_do_not_stream(monkeypatch):
    streamed = []
    monkeypatch.setattr(stream_copy, "copy", lambda dst, src: streamed.append(dst.nbytes))

    def gather(comm):
        x = nbcoll.to_device(np.arange(37, dtype=np.int64) + 1000 * comm.rank)
        y = nbcoll.zeros(37 * comm.size, np.int64)
        comm.all_gather(x, y, algo="direct")
        return nbcoll.to_host(y), comm.engine.fast.stream_bytes, comm.engine.fast.stream_shared_bytes

    expected = np.concatenate([np.arange(37) + 1000 * p for p in range(2)])
    small = CommConfig(buffsize=256, ll_bytes=0, stream_bytes=1 << 20, stream_shared_bytes=0)
    every_copy = dataclasses.replace(STREAM_EVERY_OUTPUT, stream_shared_bytes=8)
    for backend, config, streams in [("numpy", small, 1 << 20),
                                     ("numpy", dataclasses.replace(small, stream_bytes=0), 0),
                                     ("sim", every_copy, 0)]:  # fmt: skip
        with nbcoll.use_backend(backend):
            for y, stream_bytes, stream_shared_bytes in loopback.run(2, gather, config=config):
                assert np.array_equal(y, expected)
                assert stream_bytes == (streams if stream_copy.available() else 0)
                assert stream_shared_bytes == 0  # off on numpy here; never on sim, whatever the setting
    assert streamed == []


@needs_x86
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_copies_into_slots_and_windows_stream_once_per_byte_and_are_exact(monkeypatch, nranks):
    # Small outputs, so only the copies a peer reads next stream: every ring chunk into the next rank's FIFO slot
    # ((n - 1) blocks per rank) and every direct block into its owner's window (one for all readers); with the
    # default threshold, none of these small collectives streams.
    streamed, original = [], stream_copy.copy

    def counted(dst, src):
        streamed.append(dst.nbytes)
        return original(dst, src)

    def gather(comm, algo):
        x = np.arange(37, dtype=np.int64) + 1000 * comm.rank
        y = np.full(37 * comm.size, -1, np.int64)
        comm.all_gather(x, y, algo=algo)
        return y

    monkeypatch.setattr(stream_copy, "copy", counted)
    block, expected = 37 * 8, np.concatenate([np.arange(37) + 1000 * p for p in range(nranks)])
    config = CommConfig(buffsize=256, timeout=60, ll_bytes=0, stream_bytes=1 << 20, stream_shared_bytes=block)
    with nbcoll.use_backend("numpy"):
        for algo, staged in [("ring", nranks * (nranks - 1) * block), ("direct", nranks * block if nranks > 1 else 0)]:
            for settings, expected_bytes in [
                (config, staged),
                (dataclasses.replace(config, stream_shared_bytes=16 << 10), 0),
            ]:
                streamed.clear()
                for y in loopback.run(nranks, gather, algo, config=settings):
                    assert np.array_equal(y, expected), algo
                assert sum(streamed) == expected_bytes, (algo, settings.stream_shared_bytes, streamed)


def test_the_settings_are_read_once_and_checked():
    assert CommConfig.from_env({}).stream_bytes == 8 << 20
    assert CommConfig.from_env({"NBCOLL_STREAM_BYTES": "0"}).stream_bytes == 0
    assert CommConfig.from_env({}).stream_shared_bytes == 16 << 10
    assert CommConfig.from_env({"NBCOLL_STREAM_SHARED_BYTES": "0"}).stream_shared_bytes == 0
    with pytest.raises(ValueError, match="NBCOLL_STREAM_SHARED_BYTES: must be >= 0"):
        CommConfig.from_env({"NBCOLL_STREAM_SHARED_BYTES": "-8"})
    with pytest.raises(ValueError, match="NBCOLL_STREAM_BYTES: must be >= 0"):
        CommConfig.from_env({"NBCOLL_STREAM_BYTES": "-1"})
    with pytest.raises(ValueError, match="NBCOLL_STREAM_BYTES: must be >= 0"):
        CommConfig(stream_bytes=-1)
