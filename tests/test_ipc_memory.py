"""IpcBuffer: memory shared live between processes, with no name left behind in /dev/shm however a process ends."""

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import nbcoll
from nbcoll import ipc_memory
from nbcoll.backend import device_backend
from nbcoll.ipc_memory import IpcBuffer, IpcHandleInfo, cleanup_stale, creator_pid
from nbcoll.kernels import elementwise
from nbcoll.memory import DTYPES
from nbcoll.testing import run_ranks

MPI_SCRIPTS = Path(__file__).parent / "mpi_scripts"
OWNER_SCRIPT = MPI_SCRIPTS / "ipc_owner.py"
SHM = Path(ipc_memory.SHM_DIR)


@pytest.fixture
def shm_backend(backend):
    """The backends whose buffers are shared memory; CUDA IPC cannot open a handle in the process that made it."""
    if backend == "cuda":
        pytest.skip("CUDA IPC handles open only in another process: see test_cuda_ipc_across_ranks")
    return backend


needs_dev_shm = pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm to look at segment names")


def segment_exists(name: str) -> bool:
    return (SHM / name).exists()


def segments_of(pid: int) -> list[str]:
    return [p.name for p in SHM.iterdir() if creator_pid(p.name) == pid]


def start_owner(mode: str, **kwargs) -> tuple[subprocess.Popen, str]:
    """Start ipc_owner.py in ``mode`` on the sim backend; return the process and the name it created."""
    env = {**os.environ, "NBCOLL_BACKEND": "sim"}
    process = subprocess.Popen(
        [sys.executable, str(OWNER_SCRIPT), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, **kwargs,
    )  # fmt: skip
    name = process.stdout.readline().strip()
    assert name.startswith(f"nbcoll_{process.pid}_"), process.stderr.read() if not name else name
    return process, name


# -------------------------------------------------------------------------------------------------------------
# In one process.


@pytest.mark.parametrize("shape", [0, 1, 7, (3, 5)])
def test_open_sees_the_owner_memory_live(shm_backend, shape):
    with IpcBuffer.create(shape, np.int32) as owner, IpcBuffer.open(owner.handle) as peer:
        size = int(np.prod(shape))
        values = -np.arange(size, dtype=np.int32).reshape(owner.array.shape)
        elementwise.unary("neg", nbcoll.to_device(values), out=peer.array)  # a kernel writes through the peer
        assert np.array_equal(nbcoll.to_host(owner.array), -values)
        assert tuple(peer.array.shape) == owner.handle.shape == np.empty(shape).shape


@pytest.mark.parametrize("dtype", DTYPES + (np.dtype(np.bool_),), ids=str)
def test_every_dtype_round_trips(shm_backend, dtype):
    data = (np.arange(5) % 2).astype(dtype)
    with IpcBuffer.create(5, dtype) as owner, IpcBuffer.open(owner.handle) as peer:
        owner.array[:] = data
        assert peer.array.dtype == dtype
        assert np.array_equal(nbcoll.to_host(peer.array), data)


def test_the_array_is_a_device_array_of_the_backend(shm_backend):
    with IpcBuffer.create(4, np.float32) as owner:
        assert nbcoll.memory.is_device_array(owner.array)
    with IpcBuffer.create(4, np.float32, host=True) as host_page:
        assert isinstance(host_page.array, np.ndarray)
        assert host_page.handle.host


@needs_dev_shm
def test_names_permissions_and_handle(shm_backend):
    with IpcBuffer.create(3, np.float64, tag="a very long tag, with punctuation!") as owner:
        assert owner.name.startswith(f"nbcoll_{os.getpid()}_")
        assert len(owner.name) <= ipc_memory.MAX_NAME_LENGTH
        assert owner.name.replace("_", "").isalnum()
        assert oct(os.stat(SHM / owner.name).st_mode & 0o777) == oct(0o600)
        handle = pickle.loads(pickle.dumps(owner.handle))
        assert handle == owner.handle
        assert handle == IpcHandleInfo("shm", owner.name, (3,), "float64")
        assert creator_pid(owner.name) == os.getpid()


@needs_dev_shm
def test_unlink_keeps_the_memory_and_close_removes_the_name(shm_backend):
    owner = IpcBuffer.create(4, np.int64)
    peer = IpcBuffer.open(owner.handle)
    owner.unlink()
    assert not segment_exists(owner.name)
    owner.unlink()  # twice is harmless
    peer.array[2] = 5
    assert nbcoll.to_host(owner.array)[2] == 5
    with pytest.raises(FileNotFoundError, match="peers must open before the owner unlinks"):
        IpcBuffer.open(owner.handle)
    with pytest.raises(ValueError, match="only its owner"):
        peer.unlink()
    peer.close()
    owner.close()
    owner.close()
    assert owner.closed and peer.closed
    with pytest.raises(ValueError, match="closed"):
        _ = owner.array

    with IpcBuffer.create(4, np.int64) as scoped:
        assert segment_exists(scoped.name)
    assert not segment_exists(scoped.name)


def test_close_while_a_view_is_still_held_keeps_the_view_usable(shm_backend):
    owner = IpcBuffer.create(6, np.float32)
    peer = IpcBuffer.open(owner.handle)
    view = peer.array[2:]
    owner.array[:] = np.arange(6, dtype=np.float32)
    with pytest.warns(ResourceWarning, match="still referenced"):
        peer.close()
    assert nbcoll.to_host(view).tolist() == [2, 3, 4, 5]  # still mapped: no crash, the same memory
    owner.close()
    del view


def test_a_garbage_collected_owner_removes_its_name(shm_backend):
    owner = IpcBuffer.create(2, np.int8)
    name = owner.name
    del owner
    assert not segment_exists(name)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="shape"):
        IpcBuffer.create((2, -1), np.float32)
    with pytest.raises(TypeError, match="dtype"):
        IpcBuffer.create(2, np.complex64)
    with pytest.raises(TypeError, match="handle"):
        IpcBuffer.open("nbcoll_1_0")
    with nbcoll.use_backend("numpy"), pytest.raises(ValueError, match="'cuda' backend"):
        IpcBuffer.open(IpcHandleInfo("cuda", "nbcoll_1_0", (2,), "float32"))


class OneRankComm:
    """What share() needs of an MPI communicator, for a single rank: records what would be broadcast."""

    rank = 0

    def __init__(self):
        self.sent = []

    def bcast(self, message, root):
        self.sent.append(pickle.loads(pickle.dumps(message)))  # what MPI would do to it
        return self.sent[-1]

    def allgather(self, value):
        return [value]

    def barrier(self):
        pass


def test_share_reports_a_handle_that_cannot_be_sent_instead_of_failing_inside_bcast(monkeypatch):
    create = IpcBuffer.create

    def create_with_an_unpicklable_handle(*args, **kwargs):
        buffer = create(*args, **kwargs)
        buffer._handle = IpcHandleInfo("cuda", buffer.name, (2,), "int8", cuda_handle=lambda: None)
        return buffer

    monkeypatch.setattr(IpcBuffer, "create", create_with_an_unpicklable_handle)
    comm = OneRankComm()
    with nbcoll.use_backend("numpy"), pytest.raises(RuntimeError, match="share: rank 0 could not create the buffer"):
        ipc_memory.share(comm, 2, np.int8, host=True)
    assert isinstance(comm.sent[0], str) and "could not create" in comm.sent[0]  # the other ranks learn it too


# -------------------------------------------------------------------------------------------------------------
# Across processes, and how processes end.


@needs_dev_shm
def test_a_kernel_in_another_process_writes_into_the_owner_memory(shm_backend):
    with IpcBuffer.create((2, 3), np.int64) as owner:
        owner.array[...] = 0
        completed = subprocess.run(
            [sys.executable, str(OWNER_SCRIPT), "write", owner.name, "2", "3", "41"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "NBCOLL_BACKEND": "sim"},
        )  # fmt: skip
        assert completed.returncode == 0, completed.stderr
        assert np.array_equal(nbcoll.to_host(owner.array), np.full((2, 3), 41))
        assert segment_exists(owner.name), "a peer that exits must not unlink the owner's segment"


@needs_dev_shm
@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_no_leak_after_a_normal_exit_or_an_exception(mode):
    process, name = start_owner(mode)
    process.communicate(timeout=120)
    assert process.returncode == (0 if mode == "exit" else 1)
    assert not segment_exists(name)


@needs_dev_shm
def test_no_leak_after_sigterm():
    process, name = start_owner("wait")
    assert segment_exists(name)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    assert process.returncode == -signal.SIGTERM  # no handler: SIGTERM's own action
    deadline = time.monotonic() + 10  # the owner's resource tracker, a process of its own, unlinks what it left
    while segment_exists(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not segment_exists(name)


@needs_dev_shm
def test_no_leak_after_sigkill_when_the_name_is_unlinked_after_attach():
    process, name = start_owner("protocol", stdin=subprocess.PIPE)
    peer = IpcBuffer.open(IpcHandleInfo("shm", name, (2, 3), "float32", host=True))
    process.stdin.write("attached\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "unlinked"
    process.kill()
    process.communicate(timeout=120)
    assert not segment_exists(name)
    assert peer.array[0, 0] == 7.0  # the memory lives on while this peer maps it
    peer.close()


TRACKER_SURVIVES_SIGUSR1 = """
import os, signal, time
from multiprocessing import resource_tracker
from nbcoll.ipc_memory import IpcBuffer
buffer = IpcBuffer.create(4, "float32", host=True)
tracker = resource_tracker._resource_tracker._pid
os.kill(tracker, signal.SIGUSR1)  # what MPICH's mpiexec sends every rank's process group when one rank dies
time.sleep(0.2)
state = open(f"/proc/{tracker}/stat").read().rsplit(")", 1)[1].split()[0]
buffer.close()
print("tracker", state)
"""


@needs_dev_shm
def test_the_resource_tracker_outlives_the_sigusr1_of_a_dying_peer():
    # Else the rank's next create or unlink of a segment could fail with BrokenPipeError.
    done = subprocess.run([sys.executable, "-c", TRACKER_SURVIVES_SIGUSR1], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    word, state = done.stdout.split()
    assert word == "tracker" and state not in ("Z", "X"), done.stdout + done.stderr  # not dead
    assert "resource_tracker" not in done.stderr, done.stderr


@needs_dev_shm
def test_cleanup_stale_removes_a_segment_left_by_a_killed_process():
    # The whole session is killed, the resource tracker included: nothing but cleanup_stale can remove it.
    process, name = start_owner("wait", start_new_session=True)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=120)
    time.sleep(0.2)
    assert segment_exists(name), "the segment should be left behind by SIGKILL before unlink"
    with IpcBuffer.create(1, np.int8, host=True) as alive:  # host: a named segment on every backend, cuda too
        removed = cleanup_stale()
        assert name in removed
        assert alive.name not in removed and segment_exists(alive.name)
    assert not segment_exists(name)


# -------------------------------------------------------------------------------------------------------------
# Under mpiexec.


@pytest.mark.mpi
@needs_dev_shm
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_share_across_ranks_with_kernel_writes(nprocs):
    result = run_ranks(nprocs, MPI_SCRIPTS / "ipc_share.py", "5", env={"NBCOLL_BACKEND": device_backend()}, timeout=180)
    pids = []
    for rank, output in enumerate(result.outputs):
        assert f"rank {rank} ok" in output
        pids.append(int(output.split()[1]))
    assert all(segments_of(pid) == [] for pid in pids)


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 4])
def test_cuda_ipc_across_ranks(nprocs):
    result = run_ranks(nprocs, MPI_SCRIPTS / "ipc_share.py", "257", env={"NBCOLL_BACKEND": "cuda"}, timeout=50)
    assert all(f"rank {rank} ok" in output for rank, output in enumerate(result.outputs))
