"""Kernels launched from two threads at once on the simulator (a progress thread and the main thread) stay correct."""

import threading
import types

import numpy as np
import pytest
from numba import cuda

import nbcoll
from nbcoll import simulated_blocks
from nbcoll.backend import device_backend
from nbcoll.kernels import copy as copy_kernels


@pytest.mark.skipif(device_backend() != "sim", reason="the simulator's launch state is what this checks")
def test_the_same_kernel_launched_from_two_threads_keeps_each_launch_s_grid():
    failures = []

    def copy_many(size: int) -> None:
        src = nbcoll.to_device(np.arange(size, dtype=np.float32))
        for _ in range(6):
            dst = nbcoll.zeros(size, np.float32)
            try:
                copy_kernels.copy(dst, src)  # the grid depends on size: 1 block against 2
            except Exception as exc:  # a launch run inside the other thread's launch fails
                failures.append(f"{size}: {exc!r}")
                return
            if not np.array_equal(nbcoll.to_host(dst), np.arange(size)):
                failures.append(f"{size}: wrong elements")

    with nbcoll.use_backend("sim"):
        threads = [threading.Thread(target=copy_many, args=(size,)) for size in (35, 300)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not failures, failures


# -- blocks whose threads never meet run in the launching thread (nbcoll.simulated_blocks) -------------------------

ON_SIMULATOR = pytest.mark.skipif(device_backend() != "sim", reason="how the simulator runs blocks is checked")


@cuda.jit
def _where_am_i(grid_index, thread_x, block_x, thread_y):
    # One thread writes its own coordinates at its grid position; the last rows of the grid have no element.
    i = cuda.grid(1)
    if i < grid_index.size:
        grid_index[i] = i
        thread_x[i] = cuda.threadIdx.x
        block_x[i] = cuda.blockIdx.x
        thread_y[i] = cuda.threadIdx.y


@cuda.jit(device=True)
def _meet_the_block(x):
    cuda.syncthreads()
    return x


@cuda.jit
def _waits_for_its_block(out):
    # One thread copies its index after the whole block has arrived (through a device function).
    i = cuda.grid(1)
    out[i] = _meet_the_block(i)


_device_helpers = types.ModuleType("device_helpers")
_device_helpers.meet_the_block = _meet_the_block


@cuda.jit
def _waits_through_a_module(out):
    # The same, with the device function reached as an attribute of a module.
    i = cuda.grid(1)
    out[i] = _device_helpers.meet_the_block(i)


@cuda.jit
def _reads_past_the_end(out):
    # One thread writes one element, and the last one writes past the end.
    i = cuda.grid(1)
    out[i + 1] = i


@pytest.fixture
def simulator_threads_started(monkeypatch):
    """A list that grows by one for each Python thread the simulator starts for a CUDA thread."""
    from numba.cuda.simulator import kernel

    started, start = [], kernel.BlockThread.start
    monkeypatch.setattr(kernel.BlockThread, "start", lambda self: (started.append(self), start(self))[1])
    return started


@ON_SIMULATOR
def test_each_cuda_thread_of_a_block_run_in_turn_has_its_own_coordinates(simulator_threads_started):
    n = 45  # two blocks of 32, the second one partly idle
    with nbcoll.use_backend("sim"):
        outs = [nbcoll.zeros(n, np.int64) for _ in range(4)]
        _where_am_i[2, 32](*outs)
        assert simulator_threads_started == []  # both blocks ran in this thread
        grid_index, thread_x, block_x, thread_y = (nbcoll.to_host(out) for out in outs)
    assert simulated_blocks.independent_threads(_where_am_i.py_func)
    assert grid_index.tolist() == list(range(n))
    assert thread_x.tolist() == [i % 32 for i in range(n)] and block_x.tolist() == [i // 32 for i in range(n)]
    assert not thread_y.any()
    assert "threadIdx" not in threading.current_thread().__dict__  # the launching thread is itself again


@ON_SIMULATOR
def test_a_kernel_whose_threads_meet_keeps_the_simulator_s_threads(simulator_threads_started):
    assert not simulated_blocks.independent_threads(_waits_for_its_block.py_func)  # syncthreads one call down
    assert simulated_blocks.independent_threads(copy_kernels.copy_kernel.py_func)
    with nbcoll.use_backend("sim"):
        out = nbcoll.zeros(64, np.int64)
        _waits_for_its_block[2, 32](out)
        assert nbcoll.to_host(out).tolist() == list(range(64))
    assert len(simulator_threads_started) == 64  # a Python thread for each CUDA thread, as the simulator runs them


@ON_SIMULATOR
def test_a_device_function_reached_through_a_module_is_read_too(simulator_threads_started):
    assert not simulated_blocks.independent_threads(_waits_through_a_module.py_func)
    with nbcoll.use_backend("sim"):
        out = nbcoll.zeros(32, np.int64)
        _waits_through_a_module[1, 32](out)
        assert nbcoll.to_host(out).tolist() == list(range(32))
    assert len(simulator_threads_started) == 32


@ON_SIMULATOR
def test_an_error_in_a_block_run_in_turn_names_the_cuda_thread():
    with nbcoll.use_backend("sim"):
        out = nbcoll.zeros(4, np.int64)
        with pytest.raises(IndexError, match=r"tid=\[3, 0, 0\] ctaid=\[0, 0, 0\]"):
            _reads_past_the_end[1, 4](out)
    assert "threadIdx" not in threading.current_thread().__dict__
