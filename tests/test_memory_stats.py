"""``nbcoll.memory.stats()``: the bytes nbcoll's allocations hold now and at their peak, on every backend."""

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nbcoll
from nbcoll import memory
from nbcoll.nn import Linear
from nbcoll.optim import Adam


def _allocated() -> int:
    gc.collect()
    return memory.stats().allocated_bytes


def test_allocations_are_counted_until_freed(backend):
    before = _allocated()
    x = memory.empty((10, 3), np.float32)
    y = memory.zeros(7, np.float64)
    z = memory.to_device(np.arange(5, dtype=np.int8))
    assert _allocated() - before == 120 + 56 + 5
    view = x[2:4]  # a view keeps its allocation alive and is not counted again
    del x
    assert _allocated() - before == 120 + 56 + 5
    del view, y, z
    assert _allocated() == before


def test_on_a_gpu_an_allocation_is_counted_once_until_its_last_view_goes():
    # numba-cuda's own pointer classes, without a GPU: each array and each view gets a pointer object of its own,
    # and the allocation is freed when the last of them goes (its memory manager holds it until then).
    code = """
        import gc, types
        from numba.cuda.cudadrv import driver
        from nbcoll import memory
        manager = {}
        allocation = driver.AutoFreePointer(None, driver.binding.CUdeviceptr(1 << 20), 120, finalizer=manager.clear)
        manager["allocation"] = allocation
        x = types.SimpleNamespace(gpu_data=allocation.own())
        del allocation
        before = memory.stats().allocated_bytes
        def counted():
            gc.collect()
            return memory.stats().allocated_bytes - before
        memory.track(x)
        view = types.SimpleNamespace(gpu_data=x.gpu_data.view(16, 48))
        memory.track(view)
        print(counted())
        del x
        print(counted(), len(manager))
        del view
        print(counted(), len(manager))
        pointer = driver.MemoryPointer(None, driver.binding.CUdeviceptr(1 << 21), 64, owner=1)
        lent = types.SimpleNamespace(gpu_data=pointer)
        del pointer
        memory.track(lent)  # memory lent by an object that takes no weak reference (here an int) is still counted
        print(counted())
        del lent
        print(counted())
    """
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = "cuda"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["120", "120", "1", "0", "0", "64", "0"], proc.stdout


def test_peak_since_reset(backend):
    gc.collect()
    memory.reset_peak_stats()
    start = memory.stats()
    assert start.peak_bytes == start.allocated_bytes
    big = memory.empty(1000, np.float32)
    del big
    small = memory.empty(10, np.float32)
    now = memory.stats()
    assert now.peak_bytes == start.allocated_bytes + 4000
    assert _allocated() == start.allocated_bytes + 40
    memory.reset_peak_stats()
    assert memory.stats().peak_bytes == memory.stats().allocated_bytes
    del small


def test_tensors_count_the_results_of_the_numpy_references(backend):
    a = nbcoll.tensor(np.ones((4, 6)), dtype=np.float64)
    b = nbcoll.tensor(np.ones((6, 5)), dtype=np.float64)
    before = _allocated()
    c = a @ b  # on numpy, the reference's own array becomes the Tensor's data
    assert _allocated() - before == 4 * 5 * 8
    del c
    assert _allocated() == before


def test_parameters_gradients_and_adam_state_are_four_copies_of_the_model(backend):
    """The ZeRO paper's count for float32 with Adam: 4 bytes of parameter, 4 of gradient, 8 of state each."""
    gc.collect()
    start = _allocated()
    nbcoll.manual_seed(0)
    layer = Linear(6, 5)  # 35 parameters
    n = 35
    assert _allocated() - start == 4 * n
    layer(nbcoll.tensor(np.ones((2, 6), np.float32))).sum().backward()
    assert _allocated() - start == 8 * n
    optimizer = Adam(layer.parameters(), lr=0.1)
    optimizer.step()
    assert _allocated() - start == 16 * n, optimizer


def test_stats_is_a_frozen_snapshot():
    s = memory.stats()
    with pytest.raises(AttributeError):
        s.allocated_bytes = 0
    assert s.live_allocations >= 0


def test_an_allocation_freed_while_the_count_is_being_updated_neither_waits_nor_is_lost():
    # The garbage collector can free an array, and run its finalizer, inside the counter's own update on the same
    # thread (any allocation may start a collection). A finalizer that waited for the counter's lock there would
    # wait forever: a 4-rank run once stopped so, in the middle of a training step. In a process of its own, so
    # that a lock held forever stops only that process.
    code = """
        import gc
        import numpy as np
        from nbcoll import memory
        gc.collect()
        before = memory.stats().allocated_bytes
        x = memory.zeros(100, np.float64)
        with memory._counter.lock:  # where add() is when the collector runs
            del x
        assert memory.stats().allocated_bytes == before, "the freed bytes were lost"
        y = memory.zeros(3, np.int8)
        assert memory.stats().allocated_bytes == before + 3
        print("ok")
    """
    env = dict(os.environ, NBCOLL_BACKEND="numpy")
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("freeing an array while the memory count was being updated waited for the count's lock")
    assert done.returncode == 0 and done.stdout == "ok\n", done.stdout + done.stderr


def test_arrays_made_and_freed_on_two_threads_at_once_leave_the_count_where_it_was():
    # A progress thread allocates while the main thread does, and the collector frees cycles on either of them.
    import threading

    with nbcoll.use_backend("numpy"):
        before = _allocated()

        def churn(seed: int) -> None:
            for i in range(400):
                cycle = [memory.zeros(8 + (seed + i) % 5, np.float32)]
                cycle.append(cycle)  # freed only by the collector, wherever it happens to run
                if i % 50 == 0:
                    gc.collect()

        threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads), "an allocation waited for the count's lock"
        assert _allocated() == before
