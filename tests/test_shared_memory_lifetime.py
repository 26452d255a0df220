"""Nothing nbcoll maps can outlive its processes, and nbcoll never stands between a process and a signal.

* Every ``/dev/shm`` name is removed as soon as all its peers have mapped the segment: ranks in the middle of
  collectives have none, so ``SIGKILL`` of every rank (and of everything they started) leaves nothing behind.
* nbcoll installs no ``SIGTERM`` handler: a Python handler runs only between bytecodes, so it would keep a rank
  that is blocked in a C call alive until ``SIGKILL``.
* Peers map segments without telling Python's resource tracker, so threads that create and open buffers at the
  same time never confuse it.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nbcoll.launch import launch

SCRIPT = Path(__file__).parent / "mpi_scripts" / "shm_lifetime.py"
needs_dev_shm = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")


def _descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, ... (the resource tracker, helper processes), from ``/proc``."""
    found, todo = [], [pid]
    while todo:
        for task in glob.glob(f"/proc/{todo.pop()}/task/*/children"):
            try:
                children = [int(c) for c in Path(task).read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.mpi
@needs_dev_shm
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_sigkill_of_every_rank_in_the_middle_of_collectives_leaves_no_segment(nprocs, tmp_path):
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60", "READY_DIR": str(tmp_path)}
    outcome = []
    job = threading.Thread(target=lambda: outcome.append(launch(nprocs, SCRIPT, env=env, timeout=150)))
    job.start()
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("rank*"))) < nprocs and time.monotonic() < deadline and job.is_alive():
        time.sleep(0.05)
    time.sleep(0.2)  # the files' contents are written just after they appear
    ready = [path.read_text().split() for path in sorted(tmp_path.glob("rank*"))]
    assert len(ready) == nprocs, f"the ranks never got through their setup\n{outcome[0].report() if outcome else ''}"
    pids = [int(words[0]) for words in ready]
    assert all(len(words) == 1 for words in ready), f"names still in /dev/shm once set up: {ready}"
    time.sleep(0.5)  # well into the loop of collectives
    assert not [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")], "a name while in use"
    everything = pids + [child for pid in pids for child in _descendants(pid)]  # resource trackers included
    for pid in everything:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.join()
    assert all(_ended(pid) for pid in pids)
    left = [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]
    assert not left, f"shared memory left behind after SIGKILL: {left}"


BLOCKED_IN_C = """
import sys
from mpi4py import MPI
import nbcoll
comm = nbcoll.init()
comm.all_reduce(nbcoll.to_device(__import__("numpy").ones(3)))
print("blocked", flush=True)
MPI.COMM_WORLD.recv(source=0, tag=7)  # from itself, never sent: blocked inside MPI, a C call
"""


@pytest.mark.mpi
def test_sigterm_ends_a_process_blocked_in_a_c_call_after_init():
    env = {**os.environ, "NBCOLL_BACKEND": "numpy"}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    process = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_IN_C], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout.readline().strip() == "blocked", process.stderr.read()
        time.sleep(0.3)  # inside the receive
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("a SIGTERM did not end a process blocked in MPI after nbcoll.init()")
        assert process.returncode == -signal.SIGTERM
    finally:
        process.kill()
        process.communicate()


THREADS_CREATE_AND_OPEN = """
import threading
import numpy as np
from nbcoll.ipc_memory import IpcBuffer
owner = IpcBuffer.create(64, np.uint8, tag="t", host=True)

def create_and_close():
    for _ in range(300):
        IpcBuffer.create(64, np.uint8, tag="c", host=True).close()

def open_and_close():
    for _ in range(300):
        IpcBuffer.open(owner.handle).close()

threads = [threading.Thread(target=f) for f in (create_and_close, open_and_close, create_and_close, open_and_close)]
for t in threads:
    t.start()
for t in threads:
    t.join()
owner.close()
print("done", flush=True)
"""


@needs_dev_shm
def test_threads_creating_and_opening_buffers_never_confuse_the_resource_tracker():
    done = subprocess.run([sys.executable, "-c", THREADS_CREATE_AND_OPEN], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    # The tracker writes its tracebacks (KeyError for a name it never heard of) and leak warnings to stderr.
    assert "KeyError" not in done.stderr and "resource_tracker" not in done.stderr, done.stderr
