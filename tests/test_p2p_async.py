"""Non-blocking point-to-point: ``comm.isend``, ``comm.irecv`` and ``comm.batch_isend_irecv`` on loopback worlds.

A FIFO of 1 KiB (4 slots of 256 bytes) makes every message here larger than it, so a ring exchange only completes
when its send and its receive run as one batch, round robin; the same exchange as a lone ``isend`` then an
``irecv`` is shown to deadlock, and end in the watchdog's timeout. Inside ``comm.group()`` the handles finish
when the group does. Errors come out of ``Work.wait()``: a timeout naming the operation, the rank and the peer, an
abort while the work is in flight, a peer whose process is gone, and bad arguments before anything is queued.
"""

import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, P2POp, loopback
from nbcoll.comm.errors import CommAbortedError, CommError, CommPeerLostError, CommTimeoutError

SMALL_FIFO = CommConfig(buffsize=1024, steps=4, timeout=20)
FIFO_INTS = SMALL_FIFO.buffsize // 8  # int64 elements one FIFO holds


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def _config(timeout):
    return CommConfig(buffsize=SMALL_FIFO.buffsize, steps=SMALL_FIFO.steps, timeout=timeout)


def _message(rank, count, salt=0):
    return (np.arange(count, dtype=np.int64) * 7919 + 1000 * rank + salt) % 100003


def _ring(comm, count, rounds=1):
    """Send this rank's message right and receive the left one's, ``rounds`` times in a row, with the works of
    every round in flight at once (each round into buffers of its own)."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    works, received = [], []
    for r in range(rounds):
        x, y = nbcoll.to_device(_message(comm.rank, count, r)), nbcoll.zeros(count, np.int64)
        ops = [P2POp(comm.isend, x, right), P2POp("irecv", y, left)] if comm.size > 1 else []
        works += comm.batch_isend_irecv(ops)
        received.append(y)
    for work in works:
        work.wait()
    assert all(work.is_completed() for work in works)
    return [nbcoll.to_host(y) for y in received]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_a_ring_exchange_larger_than_the_fifo_completes_exactly(nranks):
    count = 5 * FIFO_INTS + 3  # 5 FIFOs and then some: odd, not a whole number of chunks
    got = loopback.run(nranks, _ring, count, 3, config=SMALL_FIFO)
    for rank, rounds in enumerate(got):
        for r, y in enumerate(rounds):
            want = _message((rank - 1) % nranks, count, r) if nranks > 1 else np.zeros(count, np.int64)
            np.testing.assert_array_equal(y, want)


def test_isend_then_irecv_larger_than_the_fifo_deadlocks_where_a_batch_does_not():
    # Each rank's isend waits for a receive that its peer queued behind its own isend, until the watchdog ends the
    # first to time out (whose receive then drains the other's send, if it is in time).
    count = 3 * FIFO_INTS + 1

    def lone_sends(comm):
        peer = 1 - comm.rank
        x, y = nbcoll.to_device(_message(comm.rank, count)), nbcoll.zeros(count, np.int64)
        sent, received = comm.isend(x, peer), comm.irecv(y, peer)
        outcomes = []
        for work in (sent, received):
            try:
                outcomes.append(work.wait())
            except CommError as exc:
                outcomes.append(exc)
        return outcomes

    start = time.monotonic()
    got = loopback.run(2, lone_sends, config=_config(0.3))
    assert 0.3 <= time.monotonic() - start < 5
    timeouts = [str(sent) for sent, _ in got if isinstance(sent, CommTimeoutError)]
    assert timeouts and re.match(r"rank (\d): send to peer (?!\1)\d made no progress for 0.3 s", timeouts[0])
    batched = loopback.run(2, _ring, count, config=SMALL_FIFO)
    np.testing.assert_array_equal(batched[0][0], _message(1, count))


def test_isend_and_irecv_in_issue_order_and_their_work_states():
    count = 2 * FIFO_INTS + 5
    posted = threading.Event()

    def body(comm):
        x, y = nbcoll.to_device(_message(comm.rank, count)), nbcoll.zeros(count, np.int64)
        if comm.rank == 0:
            work = comm.irecv(y, 1)
            assert not work.is_completed()  # rank 1 has not sent yet
            message = (
                r"Work.wait: irecv of 2088 bytes \(int64\[261\]\) from peer 1 on rank 0 did not finish within 0.05"
            )
            with pytest.raises(CommTimeoutError, match=message):
                work.wait(timeout=0.05)
            posted.set()
            assert work.wait() is y and work.is_completed()
            second = comm.irecv(y[:5], 1)  # the next message on the connection, in issue order
            assert second.wait(timeout=10) is not None
            return nbcoll.to_host(y)
        assert posted.wait(timeout=10)
        works = [comm.isend(x, 0), comm.isend(x[:5] + 1, 0)]
        assert [w.wait() is not None for w in works] == [True, True]
        return None

    got = loopback.run(2, body, config=SMALL_FIFO)
    want = _message(1, count)
    want[:5] += 1
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("nranks", [2, 3])
def test_isend_and_irecv_inside_a_group_finish_with_the_group(nranks):
    count = 2 * FIFO_INTS + 7

    def body(comm):
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        x, y, z = nbcoll.to_device(_message(comm.rank, count)), nbcoll.zeros(count, np.int64), nbcoll.zeros(3, np.int64)
        with comm.group():
            works = [comm.isend(x, right), comm.irecv(y, left)]
            comm.send(x[:3], right)  # a blocking send in the same group: it too runs at the group's end
            works += comm.batch_isend_irecv([P2POp("irecv", z, left)])
            assert not any(work.is_completed() for work in works)  # queued: nothing has run yet
        assert all(work.is_completed() for work in works)
        assert works[1].wait() is y
        return nbcoll.to_host(y), nbcoll.to_host(z)

    got = loopback.run(nranks, body, config=SMALL_FIFO)
    for rank, (y, z) in enumerate(got):
        np.testing.assert_array_equal(y, _message((rank - 1) % nranks, count))
        np.testing.assert_array_equal(z, _message((rank - 1) % nranks, 3))


def test_a_group_whose_body_raises_cancels_its_works():
    def body(comm):
        work = None
        with pytest.raises(RuntimeError, match="changed my mind"), comm.group():
            work = comm.isend(nbcoll.zeros(4), 1 - comm.rank)
            raise RuntimeError("changed my mind")
        with pytest.raises(CommError, match="cancelled: its group did not run"):
            work.wait()
        peer = 1 - comm.rank
        works = comm.batch_isend_irecv(
            [P2POp("isend", nbcoll.to_device(np.ones(2, np.float32)), peer), P2POp("irecv", nbcoll.zeros(2), peer)]
        )
        return works[1].wait().tolist()  # the communicator is in step: nothing of the cancelled group moved

    assert loopback.run(2, body, config=SMALL_FIFO) == [[1.0, 1.0], [1.0, 1.0]]


def test_a_receive_never_posted_ends_the_send_in_a_timeout_naming_rank_and_peer():
    count = 2 * FIFO_INTS + 1
    done = threading.Event()

    def body(comm):
        if comm.rank == 0:
            work = comm.isend(nbcoll.to_device(_message(0, count)), 2)
            assert not work.is_completed()
            with pytest.raises(CommTimeoutError, match=r"rank 0: send to peer 2 made no progress for 0.3 s") as info:
                work.wait()
            assert "isend peer=2" in str(info.value)  # the flight recorder names the call
            done.set()
        else:
            assert done.wait(timeout=10)  # rank 2 never posts its receive; nothing hangs

    loopback.run(3, body, config=_config(0.3))


def test_an_abort_fails_the_work_in_flight():
    count = 2 * FIFO_INTS + 1
    in_flight = threading.Event()

    def body(comm):
        if comm.rank == 0:
            work = comm.isend(nbcoll.to_device(_message(0, count)), 1)
            in_flight.set()
            with pytest.raises(CommAbortedError, match="rank 0: send to peer 1 stopped: .* aborted by rank 1"):
                work.wait()
            with pytest.raises(CommAbortedError):  # and whatever is posted after
                comm.irecv(nbcoll.zeros(2), 1)
        else:
            assert in_flight.wait(timeout=10)
            time.sleep(0.05)
            comm.abort()

    start = time.monotonic()
    loopback.run(2, body, config=_config(30))
    assert time.monotonic() - start < 10  # released by the abort, not the 30 s timeout


def test_a_lost_peer_fails_the_work():
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()  # an exited process: the peer rank 1 as rank 0's watchdog will see it
    left = threading.Event()

    def body(comm):
        if comm.rank == 0:
            comm.watchdog.peer_pids[1] = gone.pid
            work = comm.irecv(nbcoll.zeros(8, np.int64), 1)
            lost = rf"rank 0: recv from peer 1 failed: peer rank 1 \(pid {gone.pid}\) has exited"
            with pytest.raises(CommPeerLostError, match=lost):
                work.wait()
            left.set()
        else:
            assert left.wait(timeout=10)

    loopback.run(2, body, config=_config(20))


def test_bad_arguments_raise_before_anything_is_queued():
    def body(comm):
        x = nbcoll.to_device(np.arange(4, dtype=np.float32))
        peer = 1 - comm.rank
        with pytest.raises(ValueError, match=f"peer: rank {comm.rank} is this rank"):
            comm.isend(x, comm.rank)
        with pytest.raises(TypeError, match="peer: expected an int rank, got str"):
            comm.irecv(x, "1")
        with pytest.raises(TypeError, match="ops: expected a list of P2POp, got P2POp"):
            comm.batch_isend_irecv(P2POp("isend", x, 1))
        with pytest.raises(TypeError, match=r"ops\[1\]: expected a P2POp"):
            comm.batch_isend_irecv([P2POp("isend", x, peer), ("irecv", x, 1)])
        with pytest.raises(ValueError, match=r"ops\[1\].peer: rank 5 is out of range for a communicator of 2"):
            comm.batch_isend_irecv([P2POp("isend", x, peer), P2POp(comm.irecv, x, 5)])
        with pytest.raises(ValueError, match=r"ops\[0\].buf"):
            comm.batch_isend_irecv([P2POp(comm.irecv, x[::2], peer)])
        with pytest.raises(ValueError, match="op: expected comm.isend, comm.irecv, 'isend' or 'irecv', got 'send'"):
            P2POp("send", x, 1)
        recorded = comm.recorder.count
        with pytest.raises(ValueError, match=r"ops\[0\].op: a method of another communicator"):
            comm.batch_isend_irecv([P2POp(other.isend, x, peer)])
        assert comm.recorder.count == recorded  # nothing was recorded, nothing queued
        works = comm.batch_isend_irecv([P2POp(comm.isend, x + comm.rank, peer), P2POp(comm.irecv, x, peer)])
        return works[1].wait().tolist()

    with loopback(1) as another:
        other = another[0]
        got = loopback.run(2, body, config=SMALL_FIFO)
    assert got == [[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0]]
