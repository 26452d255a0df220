"""all_gather, reduce_scatter, broadcast and reduce with proto="device": one ring kernel per rank.

Across processes they run in the launches of ``test_device_comm.py`` (``mpi_scripts/device_comm.py``); here: one
rank, the requests the kernels cannot serve, the setting's quiet fallback, the references and the PTX.
"""

import warnings

import numpy as np
import pytest
from device_helpers import compile_ptxs, lines_in_loops, world

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.algorithms import ring_device_collectives as rdc
from nbcoll.comm.algorithms import ring_device_rank_collectives as rdrc
from nbcoll.comm.device_ring_calls import DeviceCollectives


@pytest.fixture(autouse=True)
def host_arrays():
    # NumPy arrays, as the numpy backend takes them; the kernels still run on this process's simulator.
    with nbcoll.use_backend("numpy"):
        yield


@pytest.fixture
def comm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the single-rank warning of nbcoll.init()
        comm = nbcoll.init(config=CommConfig(buffsize=64, steps=2, nchannels=2))
    yield comm
    comm.destroy()


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_on_one_rank_every_device_collective_copies_and_runs_on_the_kernel(comm, dtype):
    x = np.arange(37).astype(dtype)
    out = np.zeros_like(x)
    assert comm.all_gather(x, out, proto="device") is out
    np.testing.assert_array_equal(out, x)
    out[:] = 0
    assert comm.reduce_scatter(x, out, op="max", proto="device") is out
    np.testing.assert_array_equal(out, x)
    out[:] = 0
    np.testing.assert_array_equal(comm.broadcast(x, out, root=0, proto="device"), x)
    out[:] = 0
    np.testing.assert_array_equal(comm.reduce(x, out, op="prod", root=0, proto="device"), x)
    np.testing.assert_array_equal(comm.broadcast(x[:0], proto="device"), x[:0])
    assert isinstance(comm.engine.device, DeviceCollectives) and comm.engine.device.fallback == ""


CALLS = {
    "all_gather": lambda comm, x, **kw: comm.all_gather(x, np.zeros_like(x), **kw),
    "reduce_scatter": lambda comm, x, **kw: comm.reduce_scatter(x, np.zeros_like(x), **kw),
    "broadcast": lambda comm, x, **kw: comm.broadcast(x, **kw),
    "reduce": lambda comm, x, **kw: comm.reduce(x, **kw),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_requests_the_kernels_cannot_serve_name_the_argument(comm, name):
    call, x = CALLS[name], np.ones(3, np.float32)
    refused = {
        "algo": ({"algo": "direct"}, f"algo: proto='device' runs the ring {name.replace('_', '-')} only, got 'direct'"),
        "async_op": ({"async_op": True}, "async_op: proto='device' runs one blocking kernel per call"),
        "proto": ({"proto": "simple"}, "proto: expected one of host, device, got 'simple'"),
    }
    for kwargs, message in refused.values():
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            call(comm, x, **{"proto": "device", **kwargs})
    with pytest.raises(ValueError, match=r"sendbuf.dtype: proto='device' takes float32, float64, int32 or int64"):
        call(comm, np.ones(3, np.int8), proto="device")
    with pytest.raises(ValueError, match="async_op"), comm.group():
        call(comm, x, proto="device")
    if name in ("reduce_scatter", "reduce"):
        with pytest.raises(ValueError, match="op: proto='device' reduces with sum, prod, max or min, got 'avg'"):
            call(comm, x, op="avg", proto="device")
    assert comm.engine.device is None  # nothing was set up for a refused request


def test_bad_buffers_and_roots_are_refused_as_on_the_host(comm):
    with pytest.raises(ValueError, match="root: rank 1 is out of range for a communicator of 1 ranks"):
        comm.broadcast(np.ones(3, np.float32), root=1, proto="device")
    with pytest.raises(ValueError, match="recvbuf"):
        comm.all_gather(np.ones(3, np.float32), np.ones(4, np.float32), proto="device")
    comm.reduce(np.ones(3, np.float32), proto="device")  # the communicator is still usable after refusals


def test_the_setting_leaves_what_the_kernels_cannot_serve_on_the_host_quietly():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm = nbcoll.init(config=CommConfig(proto="device"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning: the host runs it as it would without the setting
            x = np.full(4, 3.0, np.float32)
            comm.reduce(x, op="avg")
            comm.broadcast(np.ones(2, np.int8))
            comm.all_gather(x, np.zeros(4, np.float32), algo="direct")
        assert comm.engine.device is None
        comm.reduce_scatter(x, np.zeros(4, np.float32))
        assert comm.engine.device is not None
        np.testing.assert_array_equal(x, 3.0)
    finally:
        comm.destroy()


def test_ranks_that_are_threads_fall_back_to_the_host_ring_for_every_collective():
    def body(comm):
        x = np.full(3, comm.rank + 1, np.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the one-line fallback warning
            gathered = comm.all_gather(x, np.zeros(6, np.int64), proto="device")
            comm.reduce(x, op="max", root=1, proto="device")
        return gathered, x

    (g0, x0), (g1, x1) = loopback.run(2, body, config=CommConfig(timeout=30.0))
    assert g0.tolist() == g1.tolist() == [1, 1, 1, 2, 2, 2]
    assert x0.tolist() == [1, 1, 1] and x1.tolist() == [2, 2, 2]


def test_the_references_are_the_world_references_rows():
    x = world(3, 10, np.float32, seed=1)
    for rank in range(3):
        np.testing.assert_array_equal(
            rdrc.reduce_scatter_rank_reference(x, rank, "sum", 2, 2), rdc.reduce_scatter_reference(x, "sum", 2, 2)[rank]
        )
        assert rdrc.all_gather_rank_reference(x, rank).tolist() == x.reshape(-1).tolist()
        assert rdrc.broadcast_rank_reference(x, rank, root=2).tolist() == x[2].tolist()
    ints = world(3, 5, np.int64, seed=2)
    assert rdrc.reduce_rank_reference(ints, "sum", root=1, slot_elems=2).tolist() == ints.sum(axis=0).tolist()


def test_the_per_rank_kernels_compile_for_sm90_and_spin_with_volatile_loads_in_loops():
    # One of the four, to keep the compile short: every step of each goes through the same connection_op, which
    # reduce takes with each of its flags (picked at run time); the suite's registry check compiles all of them.
    kernels = [rdrc.ring_rank_reduce_kernel.__name__]
    ptxs = compile_ptxs(rdrc.__name__, kernels, rdrc._signature("int32"))
    assert set(ptxs) == set(kernels)
    for name, ptx in ptxs.items():
        loads, in_loops = lines_in_loops(ptx, r"ld\.volatile\.global")
        assert loads >= 3 and in_loops >= 2, (name, loads, in_loops)
        assert "st.volatile.global" in ptx and "membar.sys" in ptx and "barrier.sync" in ptx, name
