"""An ``async_op=True`` call returns at once even when it is its communicator's first one-shot call, which sets the
LL buffers or the direct windows up with every peer: that set-up runs in the queue, in issue order."""

import re
import time

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, CommTimeoutError, loopback

FAST = CommConfig(timeout=10)  # a call that hangs fails in seconds, not at the default 300 s
WINDOWS = CommConfig(timeout=10, ll_bytes=0)  # no LL: the first one-shot call sets the direct windows up


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def call(comm, name: str, async_op: bool):
    """A small direct ``name`` on ``comm``: (what it returns, the result every rank should see)."""
    n, r, count = comm.size, comm.rank, 3
    if name == "all_reduce":
        x = np.full(count, r + 1.0)
        return comm.all_reduce(x, algo="direct", async_op=async_op), np.full(count, n * (n + 1) / 2)
    if name == "all_gather":
        out = np.zeros(n * count)
        want = np.repeat(np.arange(n, dtype=np.float64), count)
        return comm.all_gather(np.full(count, float(r)), out, algo="direct", async_op=async_op), want
    if name == "reduce_scatter":
        out = np.zeros(count)
        send = np.arange(n * count, dtype=np.float64)
        want = n * np.arange(r * count, (r + 1) * count, dtype=np.float64)
        return comm.reduce_scatter(send, out, algo="direct", async_op=async_op), want
    send = np.array([10.0 * r + p for p in range(n) for _ in range(count)])  # block p goes to rank p
    want = np.array([10.0 * p + r for p in range(n) for _ in range(count)])
    return comm.all_to_all(send, np.zeros(n * count), algo="direct", async_op=async_op), want


def crossed(name: str):
    """Even ranks issue an async call on ``comm``, then a blocking one on its dup; odd ranks the reverse order."""

    def rank_fn(comm):
        dup = comm.dup()
        try:
            if comm.rank % 2 == 0:
                start = time.monotonic()
                work, want_async = call(comm, name, async_op=True)
                returned_after = time.monotonic() - start
                got_blocking, want_blocking = call(dup, name, async_op=False)
            else:
                got_blocking, want_blocking = call(dup, name, async_op=False)
                start = time.monotonic()
                work, want_async = call(comm, name, async_op=True)
                returned_after = time.monotonic() - start
            np.testing.assert_array_equal(work.wait(), want_async)
            np.testing.assert_array_equal(got_blocking, want_blocking)
            return returned_after
        finally:
            dup.destroy()

    return rank_fn


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_an_async_first_call_returns_before_its_peers_join(nranks):
    returned_after = loopback.run(nranks, crossed("all_reduce"), config=FAST)
    assert max(returned_after) < FAST.timeout / 2


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter", "all_to_all"])
def test_every_small_one_shot_collective_sets_up_in_the_queue(name):
    loopback.run(3, crossed(name), config=FAST)


def test_the_first_call_that_sets_the_direct_windows_up_returns_at_once_too():
    loopback.run(2, crossed("all_reduce"), config=WINDOWS)


def test_a_set_up_that_times_out_fails_on_wait_naming_the_call_the_rank_and_the_peer():
    def rank_fn(comm):
        if comm.rank == 1:
            return None  # never reaches the call: rank 0's set-up waits for it
        work, _ = call(comm, "all_reduce", async_op=True)
        assert not work.is_completed()
        with pytest.raises(CommTimeoutError) as caught:
            work.wait()
        return str(caught.value).splitlines()[0]

    message = loopback.run(2, rank_fn, config=CommConfig(timeout=1))[0]
    assert re.search(r"rank 0: .*all_reduce #\d+ \(direct\)", message), message
    assert "ranks [1]" in message, message
