"""What goes wrong around a collective, rather than in it: concurrency, errors on one rank only, shutdown.

Run under mpiexec with no argument (every case) or case names: ``mpiexec -n 3 python comm_concurrency.py order``.
Each case works on its own duplicate of the world communicator, so a case that poisons its communicator on
purpose leaves the next case a healthy one. Every rank prints ``pid=...`` and ``<case> ok`` lines.

* ``order``: work issued while an async collective runs (a group of collectives, send and receive, a group of
  them) waits its turn: every result is exact;
* ``burst``: async collectives back to back, none lost by the progress thread;
* ``group_failure``: an async collective in a group whose body raises, or whose run fails, completes with an error;
* ``destroy``: destroying a communicator first lets its async collectives finish;
* ``root_only``: gather and scatter refused on the root only make every rank's next call raise, promptly;
* ``everyone_refuses``: the same bad argument on every rank leaves the communicator usable;
* ``read_only``: a read-only output buffer is refused by name, before anything moves;
* ``check``: with NBCOLL_CHECK=1 a refusal on one rank is seen by all, and later calls stay in step.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import CommAbortedError, CommError, init
from nbcoll.comm.errors import CollectiveMismatchError

PROMPT = 10.0
"""Seconds within which a rank must raise after a peer refused a call (NBCOLL_TIMEOUT is larger in the test)."""


def host(x) -> np.ndarray:
    return nbcoll.to_host(x)


def full(count: int, value, dtype=np.int64):
    return nbcoll.to_device(np.full(count, value, dtype))


def read_only(count: int, value, dtype=np.int64):
    """A device array that cannot be written: a read-only ndarray on numpy, None where the backend has none."""
    if nbcoll.get_backend() != "numpy":
        return None
    x = np.full(count, value, dtype)
    x.flags.writeable = False
    return x


def raises(error, call, *words) -> float:
    """Run ``call``, expect ``error`` with ``words`` in its message; return how long it took."""
    start = time.monotonic()
    try:
        call()
    except error as exc:
        for word in words:
            assert word in str(exc), f"{error.__name__} without {word!r}: {exc}"
        return time.monotonic() - start
    raise AssertionError(f"expected {error.__name__} from {call}")


def case_order(comm) -> None:
    """Work issued while an async all-reduce runs waits for it: nothing shares a connection with it."""
    n, r = comm.size, comm.rank
    right, left = (r + 1) % n, (r - 1) % n
    total = n * (n + 1) // 2
    for trial in range(4):
        big = full(1 << 15, r + 1)  # many chunks (NBCOLL_BUFFSIZE is small): still running when the next call comes
        work = comm.all_reduce(big, algo="ring", async_op=True)
        grouped = full(4, 10 * (r + 1))
        with comm.group():
            comm.all_reduce(grouped, algo="ring")
        out = full(3000, -1)
        if r % 2 == 0:  # unpaired send and receive, outside any group (an odd ring's last even rank waits a bit)
            comm.send(full(3000, r), right)
            comm.recv(out, left)
        else:
            comm.recv(out, left)
            comm.send(full(3000, r), right)
        ring_out = full(5, -1)
        with comm.group():
            comm.send(full(5, 100 + r), right)
            comm.recv(ring_out, left)
        behind = comm.all_reduce(full(7, r), algo="tree")  # synchronous, queued behind the async one
        assert np.all(host(work.wait(timeout=120)) == total), f"trial {trial}: async all-reduce {host(big)[:8]}"
        assert np.all(host(grouped) == 10 * total), f"trial {trial}: grouped all-reduce {host(grouped)}"
        assert np.all(host(out) == left), f"trial {trial}: received {np.unique(host(out))}"
        assert np.all(host(ring_out) == 100 + left), f"trial {trial}: ring received {host(ring_out)}"
        assert np.all(host(behind) == n * (n - 1) // 2), f"trial {trial}: {host(behind)}"


def case_burst(comm) -> None:
    """Async calls in quick succession: the progress thread never leaves one unstarted behind it."""
    n = comm.size
    for i in range(50):
        works = [comm.all_reduce(full(2, i + k), async_op=True) for k in range(2)]
        if i % 3 == 0:
            time.sleep(0.0002 * (i % 7))  # vary the moment of the next call against the thread's exit
        for k, work in enumerate(works):
            assert np.all(host(work.wait(timeout=60)) == n * (i + k)), f"iteration {i}"


def case_group_failure(comm) -> None:
    """A Work inside a failed group never stays pending."""
    x = full(6, comm.rank)
    try:
        with comm.group():
            work = comm.all_reduce(x, async_op=True)
            raise RuntimeError("the body fails before the group runs")
    except RuntimeError:
        pass
    raises(CommError, lambda: work.wait(timeout=30), "cancelled")
    assert work.is_completed()
    y = comm.all_reduce(full(6, comm.rank), algo="ring")  # every rank cancelled: the communicator is fine
    assert np.all(host(y) == comm.size * (comm.size - 1) // 2)
    # The group runs and fails on every rank (rank 0 aborts inside it): its Work fails with the group's error.
    doomed = comm.dup()
    try:
        with doomed.group():
            work = doomed.all_reduce(full(6, comm.rank), algo="ring", async_op=True)
            MPI.COMM_WORLD.Barrier()  # every rank has queued its all-reduce before rank 0 aborts
            if comm.rank == 0:
                doomed.abort()
    except CommAbortedError:
        pass
    else:
        raise AssertionError("the group of an aborted communicator did not raise")
    raises(CommAbortedError, lambda: work.wait(timeout=30), "aborted")
    doomed.destroy()


def case_destroy(comm) -> None:
    """destroy() lets the async collectives it finds complete, then frees the communicator."""
    n = comm.size
    mine = comm.dup()
    works = [mine.all_reduce(full(1 << 14, k + comm.rank), algo="ring", async_op=True) for k in range(3)]
    mine.destroy()
    for k, work in enumerate(works):
        assert np.all(host(work.wait(timeout=5)) == n * k + n * (n - 1) // 2), f"work {k}"
    raises(ValueError, lambda: mine.all_reduce(full(2, 1)), "destroyed")


def case_root_only(comm) -> None:
    """The root alone refuses gather (or scatter): every rank's next call raises promptly, never a wrong value."""
    n, r = comm.size, comm.rank
    for name in ("gather", "scatter"):
        mine = comm.dup()
        if name == "gather":
            call = lambda c=mine: c.gather(full(2, r + 1), None, root=0)  # noqa: E731
        else:
            call = lambda c=mine: c.scatter(full(2 * n, 5) if r else None, full(2, 0), root=0)  # noqa: E731
        if r == 0:
            raises(ValueError, call, "root")
        else:
            start = time.monotonic()
            try:  # gather: the chunks fit the root's FIFO; scatter: waits for the root, which refused
                call()
            except CommAbortedError:  # the root's refusal arrived first: this rank does not run it either
                pass
            elapsed = time.monotonic() - start
            assert elapsed < PROMPT, f"{name}: rank {r} waited {elapsed:.1f} s for the root that refused"
        elapsed = raises(CommError, lambda c=mine: c.all_reduce(full(6, r + 1), algo="ring"))
        assert elapsed < PROMPT, f"{name}: the all-reduce after the refusal took {elapsed:.1f} s to raise"
        raises(CommError, mine.barrier)
        mine.destroy()
    print(f"rank {r}: root_only: every rank raised after the root's refusal")


def case_everyone_refuses(comm) -> None:
    """The same bad argument on every rank: every rank raises, and the communicator stays usable."""
    n, r = comm.size, comm.rank
    for _ in range(2):
        raises(ValueError, lambda: comm.all_reduce(full(4, r), full(5, 0)), "recvbuf")
        raises(ValueError, lambda: comm.all_gather(full(4, r), full(5, 0)), "recvbuf")
    y = comm.all_reduce(full(6, r + 1), algo="ring")
    assert np.all(host(y) == n * (n + 1) // 2), host(y)


def case_read_only(comm) -> None:
    """A read-only output buffer: a ValueError naming it, nothing moved, and the communicator still works."""
    n, r = comm.size, comm.rank
    if nbcoll.get_backend() != "numpy":
        return
    comm.reset_counters()
    cases = [
        (lambda: comm.all_reduce(full(6, r), read_only(6, 0)), "recvbuf"),
        (lambda: comm.all_reduce(read_only(6, r)), "sendbuf"),  # in place: sendbuf is also the output
        (lambda: comm.broadcast(full(6, r), read_only(6, 0)), "recvbuf"),
        (lambda: comm.all_gather(full(2, r), read_only(2 * n, 0)), "recvbuf"),
        (lambda: comm.reduce_scatter(full(2 * n, r), read_only(2, 0)), "recvbuf"),
        (lambda: comm.all_to_all(full(2 * n, r), read_only(2 * n, 0)), "recvbuf"),
        (lambda: comm.scatter(full(2 * n, r), read_only(2, 0)), "recvbuf"),
    ]
    for call, arg in cases:
        raises(ValueError, call, arg, "read-only")
    if r == 0:
        raises(ValueError, lambda: comm.recv(read_only(4, 0), 1), "buf", "read-only")
    assert comm.counters.bytes_sent == 0, "bytes moved before the read-only buffer was refused"
    y = comm.all_reduce(full(6, r + 1), algo="ring")
    assert np.all(host(y) == n * (n + 1) // 2), host(y)
    # On one rank only: that rank refuses, the others raise instead of leaving data behind or waiting.
    for name in ("all_reduce", "gather"):
        mine = comm.dup()
        refuser = n - 1 if name == "all_reduce" else 0
        out = read_only(6 * n, 0) if r == refuser else full(6 * n, 0)
        try:
            if name == "all_reduce":
                mine.all_reduce(full(6 * n, r), out, algo="ring")
            else:
                mine.gather(full(6, r), out, root=0)
        except ValueError as exc:
            assert r == refuser and "read-only" in str(exc), exc
        except CommAbortedError:
            assert r != refuser
        elapsed = raises(CommError, lambda c=mine: c.all_reduce(full(6, r), algo="ring"))
        assert elapsed < PROMPT, f"{name}: the all-reduce after the refusal took {elapsed:.1f} s to raise"
        mine.destroy()


def case_check(comm) -> None:
    """NBCOLL_CHECK=1: one rank's refusal is part of the exchange, so later identical calls stay in step.

    Settings are read once, when a communicator is created: the checking one is created with the variable set.
    """
    n, r = comm.size, comm.rank
    os.environ["NBCOLL_CHECK"] = "1"
    try:
        checked = init(MPI.COMM_WORLD)
    finally:
        del os.environ["NBCOLL_CHECK"]
    assert checked.config.check
    checked.all_reduce(full(4, r))
    if r == n - 1:
        raises(ValueError, lambda: checked.all_reduce(full(4, r), full(3, 0)), "recvbuf")
    else:
        raises(CollectiveMismatchError, lambda: checked.all_reduce(full(4, r)), f"rank(s) {n - 1} refused")
    for _ in range(3):
        y = checked.all_reduce(full(8, r + 1), algo="ring")
        assert np.all(host(y) == n * (n + 1) // 2), host(y)
    checked.destroy()


CASES = ["order", "burst", "group_failure", "destroy", "root_only", "everyone_refuses", "read_only", "check"]


def main(names: list[str]) -> int:
    world = init()
    print(f"pid={os.getpid()}", flush=True)
    for name in names or CASES:
        comm = world.dup()
        start = time.monotonic()
        globals()[f"case_{name}"](comm)
        comm.destroy()
        print(f"rank {world.rank}: {name} ok ({time.monotonic() - start:.1f} s)", flush=True)
    world.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
