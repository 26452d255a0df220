"""all_reduce(proto="device"): one ring kernel per rank process, spinning on the counters its neighbours write.

The multi-rank cases run ``mpi_scripts/device_comm.py`` on the simulator, one launch per rank count; each rank
prints ``pid=...`` and no ``/dev/shm/nbcoll_<pid>_*`` name of those ranks may be left afterwards.
"""

import glob
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from device_helpers import compile_ptx, lines_in_loops

import nbcoll
from nbcoll.comm import CommConfig, CommPeerLostError, CommTimeoutError, device_connections, loopback
from nbcoll.comm import device_collective as dc
from nbcoll.comm.algorithms import ring_device_rank as rdr
from nbcoll.comm.device import prims as dp
from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "device_comm.py"


@pytest.fixture(autouse=True)
def host_arrays():
    """The in-process cases pass NumPy arrays, as the numpy backend takes them; the kernels still run on the
    simulator this process has (the device backend), whatever the backend of the arrays."""
    with nbcoll.use_backend("numpy"):
        yield


def assert_no_shared_memory_left(outputs):
    pids = [int(p) for out in outputs for p in re.findall(r"^pid=(\d+)$", out, re.M)]
    assert pids, "the script printed no pid= line"
    left = [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]
    assert not left, f"shared memory left behind: {left}"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_device_all_reduce_across_processes_equals_the_host_ring_and_survives_faults(nprocs, mpiexec_keeping_survivors):
    env = {"NBCOLL_BACKEND": "sim", "FAULT_TIMEOUT": "3"}
    result = run_ranks(nprocs, SCRIPT, "--faults", env=env, timeout=120)
    survivors = range(nprocs - 1)
    for rank in survivors:
        out = result.outputs[rank]
        assert "device cases ok" in out and "stalled and exited peers ok" in out, result.report()
        assert "the other collectives ok" in out and "stalled broadcast root ok" in out, result.report()
        # the lost peer is named: the stalled rank, or a survivor that finished and exited before this rank's
        # watchdog looked (both are gone by then; the watchdog names the first it finds)
        lost = [int(peer) for peer in re.findall(r"peer rank (\d+)", out)]
        assert "CommTimeoutError" in out and lost and rank not in lost, result.report()
    assert_no_shared_memory_left(result.outputs)


# -- one rank, and the requests the kernel cannot serve ----------------------------------------------------------


@pytest.fixture
def comm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the single-rank warning of nbcoll.init()
        comm = nbcoll.init(config=CommConfig(buffsize=64, steps=2, nchannels=2))
    yield comm
    comm.destroy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_a_single_rank_device_all_reduce_copies(comm, dtype):
    x = np.arange(37).astype(dtype)
    out = np.zeros_like(x)
    assert comm.all_reduce(x, out, op="max", proto="device") is out
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(comm.all_reduce(x[:0], proto="device"), x[:0])
    assert comm.engine.device is not None and comm.engine.device.fallback == ""


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"op": "avg"}, "op: proto='device' reduces with sum, prod, max or min, got 'avg'"),
        ({"algo": "tree"}, "algo: proto='device' runs the ring all-reduce only, got 'tree'"),
        ({"async_op": True}, "async_op: proto='device' runs one blocking kernel per call"),
        ({"proto": "simple"}, "proto: expected one of host, device, got 'simple'"),
    ],
)
def test_requests_the_kernel_cannot_serve_name_the_argument(comm, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        comm.all_reduce(np.ones(3, np.float32), **{"proto": "device", **kwargs})
    with pytest.raises(ValueError, match=r"sendbuf.dtype: proto='device' takes float32, float64, int32 or int64"):
        comm.all_reduce(np.ones(3, np.int8), proto="device")
    with pytest.raises(ValueError, match="async_op"), comm.group():
        comm.all_reduce(np.ones(3, np.float32), proto="device")
    assert comm.engine.device is None  # nothing was set up for a refused request


def test_nbcoll_proto_is_read_once_and_leaves_other_requests_on_the_host():
    assert CommConfig.from_env({"NBCOLL_PROTO": "Device"}).proto == "device"
    assert CommConfig.from_env({}).proto is None
    with pytest.raises(ValueError, match="NBCOLL_PROTO: expected one of host, device, got 'gpu'"):
        CommConfig.from_env({"NBCOLL_PROTO": "gpu"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm = nbcoll.init(config=CommConfig(proto="device"))
    try:
        x = np.full(4, 3.0, np.float32)
        comm.all_reduce(x, op="avg")  # the setting makes no error of what the kernel cannot do: the host runs it
        assert comm.engine.device is None
        comm.all_reduce(x)
        assert comm.engine.device is not None
        np.testing.assert_array_equal(x, 3.0)
    finally:
        comm.destroy()


def test_ranks_that_are_threads_fall_back_to_the_host_ring_with_a_warning():
    def body(comm):
        x = np.full(5, comm.rank + 1, np.int64)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            comm.all_reduce(x, proto="device")
        return x, [str(w.message) for w in caught]

    results = loopback.run(2, body, config=CommConfig(timeout=30.0))
    for x, caught in results:
        np.testing.assert_array_equal(x, 3)
        assert any("threads of one process" in w and "host-driven ring" in w for w in caught), caught


# -- several processes on one GPU without MPS: the decision, with fakes -------------------------------------------


def test_mps_is_seen_by_its_pipe_directory():
    assert dc.mps_visible({"CUDA_MPS_PIPE_DIRECTORY": "/run/mps"}, is_dir=lambda path: False)
    assert dc.mps_visible({}, is_dir=lambda path: path == dc.MPS_PIPE_DIRECTORY)
    assert not dc.mps_visible({"CUDA_MPS_PIPE_DIRECTORY": " "}, is_dir=lambda path: False)


def test_two_ranks_on_one_gpu_without_mps_are_a_problem_and_with_mps_are_not():
    assert dc.shared_gpu_problem(["GPU-a", "GPU-b", "GPU-c"], mps=False) == ""
    assert "ranks 1 and 2 share GPU GPU-b without MPS" in dc.shared_gpu_problem(["GPU-a", "GPU-b", "GPU-b"], False)
    assert dc.shared_gpu_problem(["GPU-a", "GPU-a"], mps=True) == ""


class _FakeDevice:
    uuid = "GPU-0f00"


def test_on_a_shared_gpu_the_device_request_falls_back_with_one_line(monkeypatch, comm):
    # As on a cuda machine whose two ranks got the same GPU, and no MPS daemon.
    monkeypatch.setattr(device_connections, "world_problem", lambda comm: "")
    monkeypatch.setattr(device_connections.backend, "is_simulator", lambda: False)
    monkeypatch.setattr(device_connections.DeviceAllReduce, "cuda_device", staticmethod(lambda: _FakeDevice()))
    exchanged = []
    monkeypatch.setattr(device_connections, "_exchange", lambda *a, **k: exchanged.append(a[2]) or [a[2], a[2]])
    monkeypatch.setattr(device_connections, "mps_visible", lambda: False)
    monkeypatch.setattr(type(comm), "size", property(lambda self: 2))
    with pytest.warns(RuntimeWarning, match=r"host-driven ring here: ranks 0 and 1 share GPU GPU-0f00 without MPS"):
        device = device_connections.DeviceAllReduce(comm)
    assert exchanged == ["GPU-0f00"] and "share GPU" in device.fallback


# -- the host's watch and its errors ------------------------------------------------------------------------------


def test_the_watch_aborts_for_a_dead_peer_or_an_aborted_communicator():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    abort = np.zeros(1, np.int32)
    with dc.KernelWatch(abort, 60.0, lambda: 0, lambda: None, {2: gone.pid}) as watch:
        time.sleep(0.2)
    assert watch.reason == ("lost", 2) and abort[0] == 1
    abort[0] = 0
    with dc.KernelWatch(abort, 60.0, lambda: None, lambda: 1, {}) as watch:
        time.sleep(0.2)
    assert watch.reason == ("aborted", 1) and abort[0] == 1
    ticks = iter(range(10**6))
    abort[0] = 0
    with dc.KernelWatch(abort, 0.05, lambda: next(ticks), lambda: None, {}) as watch:  # always moving
        time.sleep(0.3)
    assert watch.reason is None and abort[0] == 0


def test_the_errors_name_the_collective_the_rank_the_peer_and_the_step():
    status = np.array([[dp.ABORTED_SEND, 4], [dp.OK, 7]])
    args = {"rank": 3, "nranks": 4, "call": "all_reduce #9 (ring, device)", "timeout": 5.0, "pids": {0: 1234}}
    lost = dc.failure(status, ("lost", 0), **args)
    assert isinstance(lost, CommPeerLostError)
    assert str(lost) == (
        "rank 3: all_reduce #9 (ring, device) failed: peer rank 0 (pid 1234) has exited: channel 0 waited for a "
        "free slot of its next rank (rank 0) at step 4"
    )
    assert isinstance(dc.failure(status, ("timeout", None), **args), CommTimeoutError)
    assert "aborted by rank 1" in str(dc.failure(status, ("aborted", 1), **args))
    assert dc.failure(np.zeros((2, 2), np.int64), None, **args) is None


# -- the kernel on a GPU --------------------------------------------------------------------------------------------


def test_the_per_rank_kernel_compiles_for_sm90_and_spins_with_volatile_loads_in_loops():
    ptx = compile_ptx(rdr.__name__, "ring_rank_all_reduce_kernel", rdr._signature("float32"))
    loads, in_loops = lines_in_loops(ptx, r"ld\.volatile\.global")
    assert loads >= 5 and in_loops >= 5, (loads, in_loops)
    assert ptx.count("st.volatile.global") >= 2 and "membar.sys" in ptx and "barrier.sync" in ptx


def test_the_reference_is_the_world_kernels_row():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert rdr.rank_reference(x, 2, slot_elems=1).tolist() == [12, 15, 18, 21]
