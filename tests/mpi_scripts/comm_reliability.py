"""Regressions of the communicator around single calls: the tuner, FIFO settings, NBCOLL_ALGO, window setup, faults.

Run under mpiexec with one section name: ``mpiexec -n 3 python comm_reliability.py tuner``. Every rank prints
``pid=...`` first (the test looks for ``/dev/shm`` names of those pids afterwards) and ``<section> ok`` at the end.
"""

from __future__ import annotations

import atexit
import glob
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import CommAbortedError, CommError, CommPeerLostError, CommTimeoutError, init
from nbcoll.comm.config import CommConfig

WORLD = MPI.COMM_WORLD
print(f"pid={os.getpid()}", flush=True)


def leave_now(status: int = 0) -> None:
    """Exit without MPI_Finalize, which would wait for a rank that is gone or stopped."""
    sys.stdout.flush()
    atexit.register(os._exit, status)
    sys.exit(status)


def own_segments(pid: int | None = None) -> list[str]:
    return glob.glob(f"/dev/shm/nbcoll_{pid or os.getpid()}_*")


def section_tuner() -> None:
    """Every rank picks the same algorithm, whatever links it uses itself and whatever its own calibration says.

    ``TUNER_DIR/common.json`` holds the values ``nbcoll calibrate`` measured on a 2-core machine (ipc alpha 243 us,
    mpi 164 us); ``TUNER_DIR/rank<r>.json`` gives each rank a calibration of its own, as machines of their own would.
    """
    directory = os.environ["TUNER_DIR"]
    os.environ["NBCOLL_TUNER_FILE"] = os.path.join(directory, "common.json")
    comm = init()
    nbytes = 256 << 10
    for phase in ("one calibration file", "a calibration per rank"):
        chosen = {
            coll: comm.engine.choose(coll, nbytes) for coll in ("broadcast", "reduce", "all_reduce", "all_gather")
        }
        everyone = WORLD.allgather(chosen)
        assert all(c == everyone[0] for c in everyone), f"{phase}: ranks chose differently: {everyone}"
        x = nbcoll.to_device(np.full(nbytes // 4, 7.0 if comm.rank == 0 else 0.0, np.float32))
        comm.broadcast(x, root=0)
        assert np.all(nbcoll.to_host(x) == 7.0)
        print(f"rank {comm.rank}: {phase}: every rank chose {everyone[0]}", flush=True)
        os.environ["NBCOLL_TUNER_FILE"] = os.path.join(directory, f"rank{comm.rank}.json")
        comm.destroy()
        comm = init()  # a new communicator reads its settings, and the calibration, again
    comm.destroy()


def section_steps() -> None:
    """NBCOLL_STEPS=1 is refused with a message naming the setting and its minimum; 2 slots run every ring."""
    for make in (lambda: CommConfig(steps=1, buffsize=64), lambda: CommConfig.from_env({"NBCOLL_STEPS": "1"})):
        try:
            make()
        except ValueError as err:
            assert "NBCOLL_STEPS" in str(err) and ">= 2" in str(err), err
        else:
            raise AssertionError("NBCOLL_STEPS=1 was accepted")
    comm = init(config=CommConfig(steps=2, buffsize=32, timeout=30.0))  # two slots of 16 bytes: many chunks
    n, r = comm.size, comm.rank
    x = nbcoll.to_device(np.arange(37, dtype=np.int32) + r)
    comm.all_reduce(x, algo="ring")
    assert np.array_equal(nbcoll.to_host(x), n * np.arange(37) + n * (n - 1) // 2)
    full = nbcoll.to_device(np.arange(11 * n, dtype=np.int64) * (r + 1))
    block = nbcoll.zeros(11, np.int64)
    comm.reduce_scatter(full, block, algo="ring")
    assert np.array_equal(nbcoll.to_host(block), np.arange(r * 11, (r + 1) * 11) * n * (n + 1) // 2)
    gathered = nbcoll.zeros(9 * n, np.uint8)
    comm.all_gather(nbcoll.to_device(np.full(9, r, np.uint8)), gathered, algo="ring")
    assert np.array_equal(nbcoll.to_host(gathered), np.repeat(np.arange(n), 9))
    comm.destroy()


def section_algo_mask() -> None:
    """NBCOLL_ALGO lists leave the collectives they cannot apply to working; a per-collective misfit is refused
    when the setting is read, as a communicator is created."""
    for setting in ("ring,tree", "^direct", "ring"):
        os.environ["NBCOLL_ALGO"] = setting
        comm = init()  # settings are read once, when a communicator is created
        n, r = comm.size, comm.rank
        send = nbcoll.to_device(np.arange(2 * n, dtype=np.int32) + 100 * r)
        recv = nbcoll.zeros(2 * n, np.int32)
        comm.all_to_all(send, recv)
        assert np.array_equal(nbcoll.to_host(recv).reshape(n, 2)[:, 0], 100 * np.arange(n) + 2 * r)
        out = nbcoll.zeros(3 * n, np.float32) if r == 0 else None
        comm.gather(nbcoll.to_device(np.full(3, r, np.float32)), out, root=0)
        if r == 0:
            assert np.array_equal(nbcoll.to_host(out), np.repeat(np.arange(n), 3))
        part = nbcoll.zeros(2, np.float64)
        comm.scatter(nbcoll.to_device(np.repeat(np.arange(n, dtype=np.float64), 2)) if r == 0 else None, part)
        assert np.all(nbcoll.to_host(part) == r)
        y = nbcoll.to_device(np.ones(5, np.int64))
        comm.all_reduce(y)
        assert np.all(nbcoll.to_host(y) == n)
        comm.destroy()
    os.environ["NBCOLL_ALGO"] = "gather:^direct"
    try:
        init()
    except ValueError as err:
        assert "NBCOLL_ALGO: 'gather:^direct' excludes every algorithm of gather" in str(err), err
    else:
        raise AssertionError("gather:^direct was accepted")
    finally:
        del os.environ["NBCOLL_ALGO"]


def section_window_timeout() -> None:
    """The last rank never calls the first one-shot collective, nor dup: the others raise within NBCOLL_TIMEOUT
    each time, and their window segments are gone at once (not only at exit)."""
    others = WORLD.Split(int(WORLD.rank == WORLD.size - 1))  # the ranks that do come, to leave together
    comm, spare = init(), init()  # the failed setup leaves comm unusable; spare is for the dup
    timeout = comm.config.timeout
    if comm.rank == comm.size - 1:
        deadline = time.monotonic() + 2 * timeout + 20  # never joins; leaves once the others have given up twice
        while not WORLD.Iprobe(source=0, tag=99) and time.monotonic() < deadline:
            time.sleep(0.05)
        leave_now()
    start = time.monotonic()
    try:
        comm.all_reduce(nbcoll.to_device(np.ones(4, np.float32)), algo="direct")
    except (CommTimeoutError, CommAbortedError) as err:
        # Both waiting ranks time out at about the same moment. The first to do so refuses the call, and a rank
        # still waiting in the setup for that call then aborts at once (the refuser will never join it): the
        # other rank may see that abort, a moment before its own timeout, naming the same setup and late rank.
        elapsed = time.monotonic() - start
        message = str(err)
        print(f"rank {comm.rank}: {type(err).__name__} after {elapsed:.2f} s: {message.splitlines()[0]}", flush=True)
        if isinstance(err, CommTimeoutError):
            assert timeout <= elapsed < timeout + 5, elapsed
        assert elapsed < timeout + 5, elapsed
        assert "direct window setup" in message and f"ranks [{comm.size - 1}]" in message, message
    else:
        raise AssertionError("the one-shot all-reduce returned without the last rank")
    assert not own_segments(), f"segments left after the failed setup: {own_segments()}"
    try:
        comm.all_reduce(nbcoll.to_device(np.ones(4, np.float32)), algo="direct")
    except CommError as err:  # the communicator is unusable now; it says so instead of trying again
        print(f"rank {comm.rank}: then {type(err).__name__}: {str(err).splitlines()[0]}", flush=True)
    else:
        raise AssertionError("a second one-shot all-reduce tried the failed setup again")
    # MPI's Dup blocks inside MPI until every rank calls it: nbcoll waits for them first, polling, and gives up.
    start = time.monotonic()
    try:
        spare.dup()
    except CommTimeoutError as err:
        elapsed = time.monotonic() - start
        assert "dup of Communicator(rank" in str(err) and f"rank {comm.rank}" in str(err), err
        assert timeout <= elapsed < timeout + 5, elapsed
    else:
        raise AssertionError("dup returned without the last rank")
    print("window_timeout ok", flush=True)
    others.Barrier()  # a rank that left early would be a dead peer to one still waiting in dup
    if comm.rank == 0:
        WORLD.send(b"", dest=comm.size - 1, tag=99)  # the last rank may go
    leave_now()


def section_sigterm() -> None:
    """Ranks wait in the first one-shot collective for the last rank, which never comes; the test sends them
    SIGTERM (``READY_DIR/rank<r>`` holds each waiting rank's pid) and times how long they take to end."""
    comm = init()
    if comm.rank == comm.size - 1:
        time.sleep(120)
        leave_now()
    with open(os.path.join(os.environ["READY_DIR"], f"rank{comm.rank}"), "w") as mine:
        mine.write(str(os.getpid()))
    comm.all_reduce(nbcoll.to_device(np.ones(4, np.float32)), algo="direct")
    raise AssertionError("the one-shot all-reduce returned without the last rank")


def section_deadpeer() -> None:
    """A dead peer that is not the first the step waits for is still noticed at once, not after the timeout.

    ``deadpeer direct``: after a first one-shot all-reduce, the last rank exits; in the next one every survivor's
    step waits for all peers, the live ones first. ``deadpeer tree``: the last rank, the root's second child,
    exits; the root's step waits for both children.
    """
    algo = sys.argv[2]
    comm = init()
    last = comm.size - 1
    x = nbcoll.to_device(np.ones(8, np.float32))
    run = (lambda: comm.all_reduce(x, algo="direct")) if algo == "direct" else (lambda: comm.reduce(x, algo="tree"))
    run()
    comm.barrier()
    if comm.rank == last:
        leave_now()
    if algo == "tree" and comm.rank != 0:
        run()  # a leaf: its chunk goes into the root's FIFO, and it is done
        print("deadpeer ok", flush=True)
        leave_now()
    start = time.monotonic()
    try:
        run()
    except CommPeerLostError as err:
        elapsed = time.monotonic() - start
        print(f"rank {comm.rank}: CommPeerLostError after {elapsed:.2f} s: {str(err).splitlines()[0]}", flush=True)
        assert f"peer rank {last}" in str(err), err
        assert elapsed < comm.config.timeout / 2, elapsed
    else:
        raise AssertionError(f"{algo} returned without rank {last}")
    print("deadpeer ok", flush=True)
    leave_now()


if __name__ == "__main__":
    section = sys.argv[1]
    globals()[f"section_{section}"]()
    print(f"{section} ok", flush=True)
