"""One-sided errors on the LL path and the direct windows: a bad argument on one rank, an abort with work in flight.

``mpiexec -n N python direct_refusals.py [all|0|1|2|cold]`` runs the cases below (see :func:`cases`), each on a
communicator of its own, and prints ``rank R: <case> ok`` per case and ``direct refusals ok`` at the end; every
rank prints ``pid=...`` first.

* ``refuse/<collective>/<path>/<bad>``: one rank passes a bad output buffer (``size``: one element too many,
  ``dtype``: float32 for int32, ``read_only``) to a direct collective small enough for LL (``ll``) or big enough
  for the windows (``registered``: its input from ``comm.alloc``, ``staged``: a plain one; a reduce-scatter that
  big is a ring). That rank raises a
  ``ValueError`` or ``TypeError`` naming ``recvbuf``; no other rank may return a result (in a broadcast that a
  reader refused, the root and the other readers may: they never read from it, and their result is exact);
  every rank raises at its next collective, within ``PROMPT`` seconds. ``/cold``: the call is the
  communicator's first one-shot collective, so the others are setting the windows up when the refusal comes.
* ``check/<path>``: with ``NBCOLL_CHECK=1`` the refusal travels in the signature exchange: the others raise
  :class:`~nbcoll.comm.errors.CollectiveMismatchError` naming the refusing rank, and later LL and window
  collectives run exactly on every rank (their rounds are still numbered alike).
* ``refused_while_in_flight/<path>``: the others' async all-reduce is in flight when the last rank refuses it:
  their ``work.wait()`` raises :class:`~nbcoll.comm.CommAbortedError`, and the output is untouched.
* ``abort_in_flight``: async LL collectives are in flight on every rank but the last when rank 0 aborts: each
  ``work.wait()`` raises :class:`~nbcoll.comm.CommAbortedError` and leaves its output untouched.

Run with ``NBCOLL_LL_BYTES=64`` and ``NBCOLL_BUFFSIZE=256``: 8 int32 go by LL, 100 take two window rounds.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

from nbcoll.comm import CommAbortedError, CommError, init
from nbcoll.comm.errors import CollectiveMismatchError

PROMPT = 5.0
"""Seconds within which every rank must raise once one refused (NBCOLL_TIMEOUT is larger)."""

COUNTS = {"ll": 8, "registered": 100, "staged": 100}
COLLECTIVES = ("all_reduce", "all_gather", "all_to_all", "reduce_scatter", "broadcast")
BLOCKED = ("all_to_all", "reduce_scatter")
"""The collectives whose input holds a block per rank."""


def values(rank: int, size: int) -> np.ndarray:
    return (np.arange(size) + 1000 * rank + 1).astype(np.int32)


def bad_output(bad: str, size: int) -> np.ndarray:
    if bad == "size":
        return np.zeros(size + 1, np.int32)
    if bad == "dtype":
        return np.zeros(size, np.float32)
    frozen = np.zeros(size, np.int32)
    frozen.flags.writeable = False
    return frozen


def setup(comm, collective: str, path: str):
    """This rank's buffers for ``collective`` on ``path``: ``(send, out size, expected result)``."""
    n, r, count = comm.size, comm.rank, COUNTS[path]
    if collective in BLOCKED:
        count = max(1, count // n)  # LL carries a segment per peer
    size = count * n if collective in BLOCKED else count
    send = comm.alloc(size, np.int32) if path == "registered" else np.empty(size, np.int32)
    send[:] = values(r, size)
    if collective == "all_reduce":
        return send, count, sum(values(p, count) for p in range(n))
    if collective == "all_gather":
        return send, count * n, np.concatenate([values(p, count) for p in range(n)])
    if collective == "all_to_all":
        return send, count * n, np.concatenate([values(p, size)[r * count : (r + 1) * count] for p in range(n)])
    if collective == "reduce_scatter":
        return send, count, sum(values(p, size)[r * count : (r + 1) * count] for p in range(n))
    return send, count, values(0, count)  # broadcast from rank 0


def run(comm, collective: str, send, out):
    kwargs = {"root": 0} if collective == "broadcast" else {}
    return getattr(comm, collective)(send, out, algo="direct", **kwargs)


def raises(error, call, *words) -> tuple[float, BaseException]:
    start = time.monotonic()
    try:
        call()
    except error as exc:
        missing = [w for w in words if w not in str(exc)]
        assert not missing, f"{error.__name__} without {missing}: {exc}"
        return time.monotonic() - start, exc
    raise AssertionError(f"expected {error.__name__}")


def case_refuse(base, collective: str, path: str, bad: str, cold: bool) -> None:
    comm = base.dup()
    n, r = comm.size, comm.rank
    refuser = (len(collective) + len(path) + len(bad)) % n  # a different rank from case to case
    send, out_size, expected = setup(comm, collective, path)
    if not cold:
        assert np.array_equal(run(comm, collective, send, np.zeros(out_size, np.int32)), expected)
        # A broadcast's reader may finish that call, reach the refused one and abort the communicator before a
        # slower peer has begun the first: an abort fails every operation not yet done, that one too.
        MPI.COMM_WORLD.Barrier()
    if r == refuser:
        raises((ValueError, TypeError), lambda: run(comm, collective, send, bad_output(bad, out_size)), "recvbuf")
    else:
        out = np.full(out_size, -7, np.int32)
        start = time.monotonic()
        try:
            run(comm, collective, send, out)
        except CommAbortedError as err:
            assert str(err).startswith(f"rank {r}: "), err
        else:  # only a broadcast can finish, where a reader refused: the others never read from it
            assert collective == "broadcast" and refuser != 0, f"rank {r} returned although rank {refuser} refused"
            assert np.array_equal(out, expected), out
        elapsed = time.monotonic() - start
        assert elapsed < PROMPT, f"rank {r} took {elapsed:.2f} s to learn of the refusal"
    MPI.COMM_WORLD.Barrier()  # every rank is past the refused call
    for algo in ("ring", "direct"):
        later = lambda a=algo: comm.all_reduce(np.ones(8, np.int32), np.zeros(8, np.int32), algo=a)  # noqa: E731
        elapsed, _ = raises(CommError, later)
        assert elapsed < PROMPT, f"rank {r}: the call after the refusal took {elapsed:.2f} s to raise"
    comm.destroy()


def case_check(base, path: str) -> None:
    """NBCOLL_CHECK=1: a refusal on one rank is everyone's error; later one-shot calls stay in step."""
    os.environ["NBCOLL_CHECK"] = "1"
    try:
        comm = init(MPI.COMM_WORLD)
    finally:
        del os.environ["NBCOLL_CHECK"]
    n, r = comm.size, comm.rank
    for refuser, collective in enumerate(COLLECTIVES):
        refuser %= n
        send, out_size, expected = setup(comm, collective, path)
        out = bad_output("dtype", out_size) if r == refuser else np.zeros(out_size, np.int32)
        if r == refuser:
            raises((ValueError, TypeError), lambda: run(comm, collective, send, out))  # noqa: B023 - called now
        else:
            message = f"rank(s) {refuser} refused"
            raises(CollectiveMismatchError, lambda: run(comm, collective, send, out), message)  # noqa: B023
        for again in ("ll", path):  # an LL round and a window round after the refusal: both in step
            send, out_size, expected = setup(comm, collective, again)
            got = run(comm, collective, send, np.zeros(out_size, np.int32))
            assert np.array_equal(got, expected), f"rank {r}: {collective} on {again} after a refusal: {got}"
    comm.destroy()


def case_refused_while_in_flight(base, path: str) -> None:
    """The others' async all-reduce is in flight when the last rank refuses it: each ``work.wait()`` raises
    CommAbortedError, promptly, and its output is untouched."""
    comm = base.dup()
    n, r = comm.size, comm.rank
    send, out_size, expected = setup(comm, "all_reduce", path)
    assert np.array_equal(run(comm, "all_reduce", send, np.zeros(out_size, np.int32)), expected)  # windows set up
    if r == n - 1:
        MPI.COMM_WORLD.Barrier()  # the others' works are in flight
        raises(ValueError, lambda: run(comm, "all_reduce", send, bad_output("size", out_size)), "recvbuf")
    else:
        out = np.full(out_size, -7, np.int32)
        work = comm.all_reduce(send, out, algo="direct", async_op=True)
        MPI.COMM_WORLD.Barrier()
        elapsed, _ = raises(CommAbortedError, lambda: work.wait(timeout=30), f"rank {r}")
        assert elapsed < PROMPT and work.is_completed(), elapsed
        assert np.all(out == -7), f"rank {r}: a refused collective wrote its output: {out}"
    raises(CommError, lambda: comm.all_reduce(np.ones(8, np.int32), algo="direct"))
    comm.destroy()


def case_abort_in_flight(base) -> None:
    comm = base.dup()
    n, r = comm.size, comm.rank
    comm.all_reduce(np.ones(8, np.int32), algo="direct")  # the LL buffers exist
    outs = [np.full(8, -7, np.int32) for _ in range(2)]
    works = []
    if r != n - 1:  # the last rank never comes: nothing can finish
        works = [comm.all_reduce(values(r, 8), out, algo="direct", async_op=True) for out in outs]
    MPI.COMM_WORLD.Barrier()
    if r == 0:
        time.sleep(0.2)  # the others' works wait, polling
        comm.abort()
    MPI.COMM_WORLD.Barrier()  # the last rank's call comes after the abort: else it would be the works' partner
    for work in works:
        elapsed, err = raises(CommAbortedError, lambda w=work: w.wait(timeout=30), "aborted by")
        assert elapsed < PROMPT and work.is_completed(), (elapsed, err)
    assert all(np.all(out == -7) for out in outs), f"rank {r}: an aborted collective wrote its output: {outs}"
    raises(CommAbortedError, lambda: comm.all_reduce(np.ones(8, np.int32), algo="direct"), "aborted by")
    comm.destroy()


def cases(which: str) -> list[tuple[str, tuple]]:
    """Every collective x path x bad argument (``all``), one bad argument per collective and path in turn,
    starting with the ``k``-th (``k`` = 0, 1 or 2: the three together make ``all``), or the refusals of a
    communicator's first one-shot call (``cold``)."""
    listed, bads = [], ("size", "dtype", "read_only")
    for i, collective in enumerate(COLLECTIVES):
        if which == "cold":
            for path in ("ll", "staged"):
                listed.append((f"refuse/{collective}/{path}/read_only/cold", (collective, path, "read_only", True)))
            continue
        for j, path in enumerate(("ll", "registered", "staged")):
            for bad in bads if which == "all" else [bads[(i + j + int(which)) % 3]]:
                listed.append((f"refuse/{collective}/{path}/{bad}", (collective, path, bad, False)))
    return listed


def main(which: str) -> int:
    cold = which == "cold"
    base = init()
    print(f"pid={os.getpid()}", flush=True)
    for name, args in cases(which):
        start = time.monotonic()
        case_refuse(base, *args)
        print(f"rank {base.rank}: {name} ok ({time.monotonic() - start:.2f} s)", flush=True)
    if cold:
        base.destroy()
        print("direct refusals ok", flush=True)
        return 0
    for path in ("registered", "staged"):
        case_check(base, path)
        print(f"rank {base.rank}: check/{path} ok", flush=True)
    for path in ("ll", "staged"):
        case_refused_while_in_flight(base, path)
        print(f"rank {base.rank}: refused_while_in_flight/{path} ok", flush=True)
    case_abort_in_flight(base)
    print(f"rank {base.rank}: abort_in_flight ok", flush=True)
    base.destroy()
    print("direct refusals ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "all"))
