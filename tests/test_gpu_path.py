"""The cuda backend's own code paths, run on any CPU as far as they go: IPC handles as bytes, the choice of GPU,
and the branches taken only on ``cuda`` (driver calls faked where a GPU would answer)."""

import ctypes
import os
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import ROOT, run_python

import nbcoll
from nbcoll import backend, cuda_ipc, device
from nbcoll.comm import bootstrap
from nbcoll.comm.debug import Logger
from nbcoll.comm.transport import mpi as mpi_transport
from nbcoll.kernels import copy as copy_kernels

RAW = bytes(range(100, 164))


# -------------------------------------------------------------------------------------------------------------
# CUDA IPC handles as bytes.


def test_ipc_handle_bytes_round_trip_with_the_installed_cuda_bindings():
    from cuda.bindings import driver

    raw = os.urandom(cuda_ipc.HANDLE_BYTES)
    handle = cuda_ipc.handle_from_bytes(raw)
    assert isinstance(handle, driver.CUipcMemHandle)
    assert cuda_ipc.handle_to_bytes(handle) == raw
    if hasattr(handle, "reserved"):  # releases before 13.4 expose the field: it must hold the same bytes
        assert bytes(handle.reserved) == raw
    other = cuda_ipc.handle_from_bytes(RAW)  # each handle owns its own 64 bytes
    assert cuda_ipc.handle_to_bytes(handle) == raw and cuda_ipc.handle_to_bytes(other) == RAW
    assert cuda_ipc.handle_to_bytes(driver.CUipcMemHandle()) == bytes(64)


def test_handle_to_bytes_reads_every_form_a_release_may_give():
    older_release = SimpleNamespace(reserved=RAW)  # cuda-bindings up to 13.3 expose the field
    ctypes_array = (ctypes.c_char * 64).from_buffer_copy(RAW)  # a ctypes binding's cu_ipc_mem_handle
    for handle in (older_release, ctypes_array, RAW):
        assert cuda_ipc.handle_to_bytes(handle) == RAW


def test_bad_handle_bytes_are_named():
    with pytest.raises(ValueError, match="raw: expected the 64 bytes of a CUDA IPC handle, got 63 bytes"):
        cuda_ipc.handle_from_bytes(RAW[:63])
    with pytest.raises(ValueError, match="raw: .* got str"):
        cuda_ipc.handle_from_bytes("not bytes")
    with pytest.raises(ValueError, match="handle: expected 64 bytes, got 10"):
        cuda_ipc.handle_to_bytes(b"0123456789")
    with pytest.raises(ValueError, match="raw: expected 64 bytes"):
        cuda_ipc.CudaIpcHandle(RAW[:8], size=8)
    with pytest.raises(ValueError, match="size and offset"):
        cuda_ipc.CudaIpcHandle(RAW, size=-1)
    with pytest.raises(TypeError, match="exported: expected a CudaIpcHandle"):
        cuda_ipc.open_array(RAW, 4, np.float32)
    with pytest.raises(ValueError, match="count: 5 elements of float32 need 20 bytes; the handle holds 16"):
        cuda_ipc.open_array(cuda_ipc.CudaIpcHandle(RAW, size=16), 5, np.float32)


def test_a_cuda_handle_is_plain_data_that_pickles():
    handle = cuda_ipc.CudaIpcHandle(RAW, size=4096, offset=256, source_info=(("pci_bus_id", 7),))
    info = nbcoll.ipc_memory.IpcHandleInfo("cuda", "nbcoll_1_0", (1024,), "float32", cuda_handle=handle)
    message = pickle.dumps(info)
    assert b"numba" not in message and b"cuda.bindings" not in message
    assert pickle.loads(message) == info and hash(pickle.loads(message)) == hash(info)


def test_ipc_buffer_cuda_path_with_only_the_driver_faked():
    """Owner export, pickle, and peer open through numba-cuda's real IpcHandle, in a process on the cuda backend."""
    completed = run_python([str(ROOT / "tests" / "mpi_scripts" / "cuda_ipc_fake_driver.py")], "cuda", timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    for check in ("export", "open and close", "unreachable GPU", "bad handle"):
        assert f"ok {check}" in completed.stdout


# -------------------------------------------------------------------------------------------------------------
# Which GPU each rank uses.


class FakeCuda:
    """``numba.cuda`` as device selection sees it: a number of GPUs, and select_device."""

    def __init__(self, count: int) -> None:
        self.gpus = list(range(count))
        self.selected: list[int] = []

    def select_device(self, number: int) -> None:
        self.selected.append(number)


@pytest.fixture
def no_gpu_chosen(monkeypatch):
    monkeypatch.setattr(device, "_selected", {})


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_each_local_rank_gets_gpu_local_rank_modulo_count(count):
    chosen = [device.device_for_local_rank(r, count) for r in range(8)]
    assert chosen == [r % count for r in range(8)]
    assert sorted(set(chosen)) == list(range(count))  # every GPU of the machine gets used


def test_local_rank_comes_from_the_launcher():
    assert device.local_rank_from_environment({}) is None
    assert device.local_rank_from_environment({"MPI_LOCALRANKID": "3"}) == 3
    assert device.local_rank_from_environment({"OMPI_COMM_WORLD_LOCAL_RANK": "2", "LOCAL_RANK": "9"}) == 2
    assert device.local_rank_from_environment({"NBCOLL_LOCAL_RANK": "1", "MPI_LOCALRANKID": "3"}) == 1
    with pytest.raises(ValueError, match="MPI_LOCALRANKID: expected a local rank .* got 'x'"):
        device.local_rank_from_environment({"MPI_LOCALRANKID": "x"})
    with pytest.raises(ValueError, match="device_count: expected at least one visible GPU, got 0"):
        device.device_for_local_rank(0, 0)
    with pytest.raises(ValueError, match="local_rank: expected >= 0"):
        device.device_for_local_rank(-1, 2)


def test_select_happens_once_and_reads_the_launcher(no_gpu_chosen, monkeypatch):
    monkeypatch.setenv("MPI_LOCALRANKID", "5")
    cuda = FakeCuda(4)
    assert device.selected() is None
    assert device.select(cuda) == 1
    assert device.select(cuda, local_rank=2) == 1  # the process is bound to its first GPU
    assert cuda.selected == [1] and device.selected() == 1
    assert device.mismatch(5, 4) == ""
    assert "its local rank on this machine is 2, which means GPU 2" in device.mismatch(2, 4)


def test_bootstrap_chooses_the_gpu_of_the_measured_local_rank(no_gpu_chosen, monkeypatch):
    cuda = FakeCuda(2)
    monkeypatch.setattr(backend, "_current", "cuda")
    monkeypatch.setattr(backend, "cuda", lambda: cuda)
    monkeypatch.setattr(backend, "select_device", lambda local_rank=None: device.select(cuda, local_rank))
    for name in device.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    log = Logger(0, None, set())
    bootstrap._choose_gpu(3, log, world_order=True)
    assert cuda.selected == [1]
    bootstrap._choose_gpu(0, log, world_order=False)  # a split-off communicator: its own numbering, no change
    assert cuda.selected == [1]
    monkeypatch.setattr(device, "_selected", {})
    device.select(cuda)  # memory was allocated before the communicator, with no local rank known: GPU 0
    with pytest.warns(RuntimeWarning, match="local rank on this machine is 1, which means GPU 1"):
        bootstrap._choose_gpu(1, log, world_order=True)


def test_no_gpu_is_chosen_off_cuda(no_gpu_chosen):
    with nbcoll.use_backend("numpy"):
        bootstrap._choose_gpu(1, Logger(0, None, set()), world_order=True)
    assert device.selected() is None
    if backend.device_backend() == "sim":
        assert backend.select_device(1) is None


# -------------------------------------------------------------------------------------------------------------
# Branches taken only on cuda.


class RecordingComm:
    """An MPI communicator that records the order of receives."""

    def __init__(self, events: list) -> None:
        self.events = events

    def Irecv(self, buffer, source, tag):  # noqa: N802 - mpi4py's name
        self.events.append("irecv")
        return SimpleNamespace(Test=lambda *args: False)


@pytest.mark.parametrize("direct", [True, False])
def test_a_device_slot_is_reposted_only_after_the_kernels_reading_it(monkeypatch, direct):
    events: list[str] = []
    monkeypatch.setattr(mpi_transport, "synchronize", lambda: events.append("sync"))
    with nbcoll.use_backend("numpy"):
        conn = mpi_transport.MpiRecvConnection(1, RecordingComm(events), steps=2, chunk_bytes=8, cuda_aware=False)
    conn.slots.direct = direct  # what NBCOLL_MPI_CUDA_AWARE=1 on cuda gives: MPI writes the device slot
    conn.expect(3)
    conn.release()  # a chunk consumed by a kernel: its slot gets the next receive
    if direct:
        assert events == ["sync", "irecv", "irecv", "sync", "irecv"]
    else:
        assert events == ["irecv", "irecv", "irecv"]


def test_storage_view_on_cuda_refuses_negative_strides_but_takes_host_views(monkeypatch):
    monkeypatch.setattr(backend, "_current", "cuda")
    reversed_device_view = SimpleNamespace(shape=(6,), strides=(-4,), dtype=np.dtype(np.float32))
    with pytest.raises(ValueError, match="src: negative strides .* are not supported on the cuda backend"):
        copy_kernels.storage_view(reversed_device_view)
    host = np.arange(6, dtype=np.float32)[::-1]
    storage, base, strides = copy_kernels.storage_view(host)
    assert storage[base] == 5 and strides == (-1,)


def test_synchronize_waits_for_the_gpu_on_cuda_only(monkeypatch):
    calls = []
    monkeypatch.setattr(backend, "cuda", lambda: SimpleNamespace(synchronize=lambda: calls.append("sync")))
    with nbcoll.use_backend("numpy"):
        nbcoll.synchronize()
    monkeypatch.setattr(backend, "_current", "cuda")
    nbcoll.synchronize()
    assert calls == ["sync"]
