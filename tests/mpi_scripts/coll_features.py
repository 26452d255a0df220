"""Collective features beyond the results: async overlap, groups, the mismatch check, bad arguments, traces, timeouts.

Run under mpiexec with one section name: ``mpiexec -n 3 python coll_features.py async``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import nbcoll
from nbcoll.comm import init
from nbcoll.comm.errors import CollectiveMismatchError, CommTimeoutError


def section_async(comm) -> None:
    """An async all-reduce completes while this rank computes: shown by the order of events, not by timing."""
    n = comm.size
    x = nbcoll.to_device(np.full(64, comm.rank + 1, np.int64))
    work = comm.all_reduce(x, algo="ring", async_op=True)
    events = []
    # A computation that only ends when the collective has: bounded by a minute rather than a step count, so a
    # loaded machine that runs the background thread slowly cannot make it look as if nothing progressed.
    deadline = time.monotonic() + 60
    step = 0
    while time.monotonic() < deadline:
        np.linalg.svd(np.random.default_rng(step).standard_normal((40, 40)))
        step += 1
        if work.is_completed():
            events.append(f"all_reduce done at step {step}")
            break
    events.append("computation loop ended")
    result = work.wait(timeout=60)
    assert events[0].startswith("all_reduce done"), f"the collective did not progress during the computation: {events}"
    assert np.all(nbcoll.to_host(result) == n * (n + 1) // 2)
    # Several in flight at once complete in issue order, with correct results.
    ys = [nbcoll.to_device(np.full(10, comm.rank * k, np.int32)) for k in range(4)]
    works = [comm.all_reduce(y, async_op=True, algo="tree") for y in ys]
    sync = comm.all_reduce(nbcoll.to_device(np.ones(3, np.int32)))  # synchronous, queued behind them
    assert all(w.is_completed() for w in works), "a synchronous collective overtook earlier async ones"
    for k, w in enumerate(works):
        assert np.all(nbcoll.to_host(w.wait()) == k * n * (n - 1) // 2)
    assert np.all(nbcoll.to_host(sync) == n)
    print(f"rank {comm.rank}: async ok: {events[0]}")


def section_group(comm) -> None:
    """Collectives in one group run fused, in issue order, and give the same results as one by one."""
    n, r = comm.size, comm.rank
    a = nbcoll.to_device(np.arange(5, dtype=np.int32) + r)
    b = nbcoll.to_device(np.zeros(3 * n, np.float64))
    c = nbcoll.to_device(np.full(3, float(r), np.float64))
    with comm.group():
        comm.all_reduce(a, op="max")
        comm.all_gather(c, b)
        w = comm.broadcast(nbcoll.to_device(np.full(4, 9 if r == 0 else 0, np.int8)), root=0, async_op=True)
    assert np.array_equal(nbcoll.to_host(a), np.arange(5) + n - 1)
    assert np.array_equal(nbcoll.to_host(b), np.repeat(np.arange(n, dtype=np.float64), 3))
    assert w.is_completed() and np.all(nbcoll.to_host(w.wait()) == 9)
    if n > 1:  # a group is either collectives or point-to-point: mixing them is refused before anything moves
        for first, second in [("collective", "p2p"), ("p2p", "collective")]:
            try:
                with comm.group():
                    for kind in (first, second):
                        if kind == "collective":
                            comm.all_reduce(nbcoll.to_device(np.ones(2, np.int32)))
                        else:
                            comm.send(nbcoll.to_device(np.ones(2, np.int32)), (r + 1) % n)
            except ValueError as err:
                assert "not both" in str(err) or "separate groups" in str(err), err
            else:
                raise AssertionError(f"a group mixing {first} then {second} was accepted")
    comm.barrier()
    print(f"rank {r}: group ok")


def section_check(comm) -> None:
    """NBCOLL_CHECK=1: a count mismatch raises CollectiveMismatchError on every rank, naming both sides."""
    assert os.environ.get("NBCOLL_CHECK") == "1"
    comm.all_reduce(nbcoll.to_device(np.ones(4, np.float32)))  # matching calls pass the check
    count = 5 if comm.rank == comm.size - 1 else 4
    try:
        comm.all_reduce(nbcoll.to_device(np.ones(count, np.float32)))
    except CollectiveMismatchError as err:
        message = str(err)
        assert "rank 0 called all_reduce(count=4" in message, message
        assert f"rank {comm.size - 1} called all_reduce(count=5" in message, message
        print(f"rank {comm.rank}: mismatch detected: {message.splitlines()[0]}")
    else:
        raise AssertionError("no CollectiveMismatchError")
    root = 0 if comm.rank else 1  # rank 0 disagrees about the root
    try:
        comm.broadcast(nbcoll.to_device(np.ones(2, np.int32)), root=root % comm.size)
    except CollectiveMismatchError as err:
        assert "root=" in str(err)
    else:
        raise AssertionError("no CollectiveMismatchError for a root mismatch")


def section_badargs(comm) -> None:
    """Every bad argument raises before a single byte moves (the counters stay at zero)."""
    n = comm.size
    comm.reset_counters()
    f32 = nbcoll.to_device(np.ones(6, np.float32))
    cases = [
        (lambda: comm.all_reduce(f32, nbcoll.to_device(np.ones(5, np.float32))), ValueError, "recvbuf: expected 6"),
        (lambda: comm.all_reduce(f32, nbcoll.to_device(np.ones(6, np.float64))), TypeError, "dtypes must match"),
        (lambda: comm.all_reduce(f32, op="mean"), ValueError, "op: unknown reduction op 'mean'"),
        (lambda: comm.broadcast(f32, root=n), ValueError, f"root: rank {n} is out of range"),
        (lambda: comm.reduce(f32, root=-1), ValueError, "root: rank -1 is out of range"),
        (lambda: comm.all_gather(f32, nbcoll.to_device(np.ones(6 * n + 1, np.float32))), ValueError, "recvbuf"),
        (lambda: comm.all_reduce(f32[:4], f32[2:]), ValueError, "overlap"),
        (lambda: comm.all_reduce(f32, algo="pairwise"), ValueError, "does not implement all_reduce; use one of ring"),
        (lambda: comm.all_to_all(f32, f32), ValueError, "overlap" if 6 % n == 0 else "not a multiple"),
        (lambda: comm.all_reduce(np.ones(3) if nbcoll.get_backend() != "numpy" else [1.0]), TypeError, "sendbuf"),
    ]
    for call, error, text in cases:
        try:
            call()
        except error as err:
            assert text in str(err), f"{error.__name__} without {text!r}: {err}"
        else:
            raise AssertionError(f"no {error.__name__} ({text})")
    assert comm.counters.bytes_sent == 0 and comm.counters.chunks_sent == 0, "bytes moved before an argument error"
    comm.barrier()
    print(f"rank {comm.rank}: {len(cases)} bad-argument cases ok")


def section_trace(comm) -> None:
    """NBCOLL_TRACE: one line per step per rank, with the collective, algorithm, peers and chunk range."""
    directory = os.environ["NBCOLL_TRACE"]
    x = nbcoll.to_device(np.arange(4 * comm.size, dtype=np.float32))
    comm.all_reduce(x, algo="ring")
    comm.barrier()
    with open(os.path.join(directory, f"rank{comm.rank}.jsonl")) as f:
        records = [json.loads(line) for line in f]
    ring = [rec for rec in records if rec["collective"] == "all_reduce"]
    for channel in sorted({rec["channel"] for rec in ring}):  # each channel runs the ring on its part
        steps = [rec for rec in ring if rec["channel"] == channel]
        assert len(steps) == 2 * comm.size - 1, steps  # 2(n-1) sends; the last step only receives
        assert steps[0]["primitive"] == "send" and steps[-1]["primitive"] == "recv"
    assert all(rec["algo"] == "ring" and rec["t1"] >= rec["t0"] for rec in ring)
    # One machine, ipc everywhere: the one-shot all-reduce of a small buffer stores LL lines and polls the
    # peers' lines in place, in one step, with no FIFO step and no flag to wait for.
    comm.all_reduce(x, algo="direct")
    comm.barrier()
    with open(os.path.join(directory, f"rank{comm.rank}.jsonl")) as f:
        direct = [json.loads(line) for line in f if '"algo": "direct"' in line]
    assert [rec["primitive"] for rec in direct] == ["ll_send_recv_reduce_copy"], direct
    assert np.all(nbcoll.to_host(x) == np.arange(4 * comm.size) * comm.size**2)
    print(f"rank {comm.rank}: trace ok, {len(records)} records")


def section_estimate(comm) -> None:
    """The tuner gives a positive estimate for every algorithm and picks one that applies."""
    for coll, nbytes in [("all_reduce", 8), ("all_reduce", 64 << 20), ("broadcast", 1 << 20), ("all_gather", 4096)]:
        chosen = comm.estimate(coll, nbytes)
        assert chosen > 0
    small, large = comm.estimate("all_reduce", 8, algo="ring"), comm.estimate("all_reduce", 64 << 20, algo="ring")
    assert large > small
    print(f"rank {comm.rank}: estimate ok")


def section_timeout(comm) -> None:
    """A rank that never joins the collective makes the others raise CommTimeoutError naming what they waited for."""
    if comm.rank == comm.size - 1:
        time.sleep(float(os.environ["NBCOLL_TIMEOUT"]) * 3)  # never calls all_reduce
        print(f"rank {comm.rank}: stayed away")
        return
    try:
        comm.all_reduce(nbcoll.to_device(np.ones(8, np.float32)), algo="ring")
    except CommTimeoutError as err:
        message = str(err)
        assert f"rank {comm.rank}" in message and "all_reduce" in message and "waiting for" in message, message
        assert "flight recorder" in message, message
        print(f"rank {comm.rank}: timed out as expected: {message.splitlines()[0]}")
    else:
        raise AssertionError("no CommTimeoutError")


def main() -> int:
    comm = init()
    globals()[f"section_{sys.argv[1]}"](comm)
    comm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
