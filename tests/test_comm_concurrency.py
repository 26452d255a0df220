"""Reliability around the collectives: issue order, one-sided errors, shutdown, and a seeded stress run.

The multi-rank cases live in ``mpi_scripts/comm_concurrency.py`` (one launch runs them all) and
``benchmarks/stress.py`` (a short seeded run here, a longer one as a benchmark). The queue that orders a
communicator's operations is also tested here in one process, where a race can be forced.
"""

import glob
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nbcoll.comm.errors import CommAbortedError
from nbcoll.comm.progress import Progress
from nbcoll.comm.work import Work
from nbcoll.testing import run_ranks

SCRIPTS = Path(__file__).parent / "mpi_scripts"
STRESS = Path(__file__).parent.parent / "benchmarks" / "stress.py"  # its short seeded run is the test


class _Op:
    """The least an operation needs to pass through the queue."""

    def __init__(self) -> None:
        from nbcoll.comm.debug import OperationRecord

        self.record = OperationRecord(0, "test", -1, 0, "-")


class _LingeringThread(threading.Thread):
    """A thread that stays alive a while after its target returns: the moment a submission could be lost."""

    def run(self) -> None:
        super().run()
        time.sleep(0.05)


def test_the_queue_never_loses_work_submitted_while_its_thread_exits(monkeypatch):
    monkeypatch.setattr(threading, "Thread", _LingeringThread)
    ran = []
    progress = Progress(lambda ops: ran.extend(ops), lambda: None, "test-progress")
    for i in range(5):
        work = Work(f"op {i}", i)
        progress.submit([_Op()], [work], wait=False)
        assert work.wait(timeout=10) == i  # the thread, done with the queue, is still alive when the next comes
    assert len(ran) == 5


def test_a_failed_batch_fails_every_handle_and_cancel_fails_the_queued_ones():
    started, release = threading.Event(), threading.Event()

    def drive(ops):
        started.set()
        release.wait(10)
        raise CommAbortedError("aborted")

    progress = Progress(drive, lambda: None, "test-progress")
    first, second = Work("first", None), Work("second", None)
    progress.submit([_Op()], [first], wait=False)
    assert started.wait(10)
    progress.submit([_Op()], [second], wait=False)
    progress.cancel(CommAbortedError("destroyed before it ran"))
    release.set()
    with pytest.raises(CommAbortedError, match="^aborted"):
        first.wait(timeout=10)
    with pytest.raises(CommAbortedError, match="destroyed before it ran"):
        second.wait(timeout=10)
    assert progress.quiesce(timeout=10)


def test_a_read_only_output_is_refused_by_name():
    import numpy as np

    from nbcoll import memory

    frozen = np.zeros(4)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="^recvbuf: is read-only"):
        memory.require_writable(frozen, "recvbuf")
    memory.require_writable(np.zeros(4), "recvbuf")


def _assert_no_shared_memory_left(outputs):
    pids = [int(p) for out in outputs for p in re.findall(r"^pid=(\d+)$", out, re.M)]
    assert pids, "the script printed no pid= line"
    left = [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]
    assert not left, f"shared memory left behind: {left}"


@pytest.mark.mpi
@pytest.mark.parametrize(("nprocs", "per_node"), [(2, None), (3, "2")])
def test_issue_order_one_sided_errors_and_shutdown(nprocs, per_node):
    # A small FIFO, so that an all-reduce of 256 KiB is still running when the next call comes.
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "30", "NBCOLL_BUFFSIZE": "65536"}
    env["NBCOLL_RANKS_PER_NODE"] = per_node  # 3 ranks on two pretend nodes: ipc and mpi connections
    result = run_ranks(nprocs, SCRIPTS / "comm_concurrency.py", env=env, timeout=240)
    for case in ("order", "burst", "group_failure", "destroy", "root_only", "everyone_refuses", "read_only", "check"):
        for rank, out in enumerate(result.outputs):
            assert f"rank {rank}: {case} ok" in out, f"rank {rank} did not finish {case}\n{result.report()}"
    _assert_no_shared_memory_left(result.outputs)


ONE_RANK_REFUSES = """
import numpy as np, nbcoll
comm = nbcoll.init()
frozen = np.ones(4)
frozen.flags.writeable = False
for _ in range(2):
    try:
        comm.all_reduce(frozen)
    except ValueError as err:
        assert "sendbuf: is read-only" in str(err), err
print("after refusals:", comm.all_reduce(np.ones(3)).tolist())
comm.destroy()
"""


@pytest.mark.mpi
def test_refusals_on_a_communicator_of_one_rank():
    result = run_ranks(1, code=ONE_RANK_REFUSES, env={"NBCOLL_BACKEND": "numpy"})
    assert "after refusals: [1.0, 1.0, 1.0]" in result.outputs[0]


@pytest.mark.mpi
def test_stress_mixed_operations_on_split_and_duplicated_communicators():
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60", "NBCOLL_BUFFSIZE": "65536", "NBCOLL_RANKS_PER_NODE": "2"}
    result = run_ranks(4, STRESS, "--ops", "150", "--seed", "7", env=env, timeout=240)
    for rank, out in enumerate(result.outputs):
        assert f"rank {rank}: stress ok: 150 operations" in out, result.report()
    _assert_no_shared_memory_left(result.outputs)


@pytest.mark.mpi
def test_the_stress_benchmark_relaunches_itself_under_mpiexec():
    done = subprocess.run(
        [sys.executable, str(STRESS), "--ops", "30", "--seeds", "1", "--ranks", "2"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NBCOLL_BACKEND": "numpy", "PYTHONPATH": str(STRESS.parent.parent)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0: stress ok: 30 operations x 1 seeds" in done.stdout, done.stdout
