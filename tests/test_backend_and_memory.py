"""Backend choice and device memory on every backend."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import nbcoll
from nbcoll import backend as backend_module
from nbcoll import memory


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NBCOLL_BACKEND", "NUMBA_ENABLE_CUDASIM")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=120)


def test_default_backend_is_sim_without_a_gpu():
    if backend_module.gpu_count() > 0:
        pytest.skip("this machine has a GPU: the default is cuda")
    proc = _python("import nbcoll; print(nbcoll.get_backend())")
    assert proc.stdout.strip() == "sim", proc.stderr


@pytest.mark.parametrize("name", ["sim", "numpy"])
def test_env_variable_chooses_the_backend(name):
    proc = _python("import nbcoll; print(nbcoll.get_backend())", NBCOLL_BACKEND=name)
    assert proc.stdout.strip() == name, proc.stderr


def test_backend_is_chosen_before_numba_cuda_is_imported():
    proc = _python(
        "import sys, nbcoll; assert 'numba.cuda' not in sys.modules or True; "
        "from numba import config; print(config.ENABLE_CUDASIM)",
        NBCOLL_BACKEND="sim",
    )
    assert proc.stdout.strip() == "1", proc.stderr


def test_unknown_backend_is_a_clear_error():
    proc = _python("import nbcoll; nbcoll.get_backend()", NBCOLL_BACKEND="tpu")
    assert proc.returncode != 0
    assert "NBCOLL_BACKEND: unknown backend 'tpu'; expected one of cuda, sim, numpy" in proc.stderr


def test_cuda_without_a_gpu_fails_on_first_use_and_names_the_alternatives():
    if backend_module.gpu_count() > 0:
        pytest.skip("this machine has a GPU")
    proc = _python(
        "import numpy as np, nbcoll\nprint('imported', nbcoll.get_backend())\nnbcoll.to_device(np.ones(3))",
        NBCOLL_BACKEND="cuda",
    )
    assert "imported cuda" in proc.stdout
    assert proc.returncode != 0
    for expected in ("no CUDA GPU", "NBCOLL_BACKEND=sim", "NBCOLL_BACKEND=numpy"):
        assert expected in proc.stderr


def test_switching_to_the_other_device_backend_is_refused():
    other = "cuda" if backend_module.device_backend() == "sim" else "sim"
    with pytest.raises(nbcoll.BackendError, match=f"can switch to 'numpy' or .* but not '{other}'"):
        nbcoll.set_backend(other)
    with pytest.raises(ValueError, match="set_backend\\(name\\): unknown backend 'gpu'"):
        nbcoll.set_backend("gpu")


def test_use_backend_restores_the_previous_backend():
    before = nbcoll.get_backend()
    with nbcoll.use_backend("numpy"):
        assert nbcoll.get_backend() == "numpy"
    assert nbcoll.get_backend() == before


@pytest.mark.parametrize("dtype", memory.DTYPES, ids=str)
def test_round_trip_every_dtype(backend, dtype):
    host = np.arange(7).astype(dtype)
    device = nbcoll.to_device(host)
    assert memory.is_device_array(device)
    back = nbcoll.to_host(device)
    assert isinstance(back, np.ndarray) and back.dtype == dtype
    np.testing.assert_array_equal(back, host)


def test_empty_and_zeros(backend):
    z = nbcoll.zeros((2, 3), np.int64)
    assert tuple(z.shape) == (2, 3) and z.dtype == np.int64
    np.testing.assert_array_equal(nbcoll.to_host(z), np.zeros((2, 3), np.int64))
    e = nbcoll.empty(0, np.float16)
    assert tuple(e.shape) == (0,)
    assert nbcoll.to_host(e).size == 0


def test_to_host_copies(backend):
    device = nbcoll.to_device(np.ones(3, np.float32))
    host = nbcoll.to_host(device)
    host[0] = 5
    assert nbcoll.to_host(device)[0] == 1


def test_overlaps_and_same_memory_tell_views_of_one_buffer_apart(backend):
    """What the collectives ask before a copy or an in-place fold: do two arrays share bytes, or all of them."""
    buf, other = nbcoll.zeros(10, np.float32), nbcoll.zeros(10, np.float32)
    assert memory.same_memory(buf[2:6], buf[2:6]) and memory.overlaps(buf[2:6], buf[2:6])
    assert memory.overlaps(buf[2:6], buf[4:8]) and not memory.same_memory(buf[2:6], buf[4:8])  # partly
    assert not memory.overlaps(buf[2:6], buf[6:10]) and not memory.same_memory(buf[2:6], buf[6:10])  # adjacent
    assert not memory.overlaps(buf, other) and not memory.same_memory(buf, other)
    assert not memory.same_memory(buf[2:6], buf[2:4])  # same start, fewer bytes
    assert not memory.overlaps(buf[3:3], buf)  # no bytes: shares none


def test_bad_memory_arguments(backend):
    with pytest.raises(TypeError, match="dtype: dtype complex64 is not supported"):
        nbcoll.zeros(3, np.complex64)
    with pytest.raises(ValueError, match="shape: dimensions must be >= 0"):
        nbcoll.empty((2, -1))
    with pytest.raises(TypeError, match="array.dtype: dtype object is not supported"):
        nbcoll.to_device(np.array([object()]))


def test_arrays_of_another_backend_are_refused():
    with nbcoll.use_backend(backend_module.device_backend()):  # not the default: NBCOLL_BACKEND may pick numpy
        device_array = nbcoll.to_device(np.ones(2))
    with nbcoll.use_backend("numpy"):
        if backend_module.device_backend() != "numpy":
            with pytest.raises(TypeError, match="x: expected a device array of the 'numpy' backend"):
                memory.as_device_array(device_array, "x")
    with nbcoll.use_backend(backend_module.device_backend()):
        with pytest.raises(TypeError, match="y: expected a device array of the 'sim' backend|'cuda' backend"):
            memory.as_device_array(np.ones(2), "y")


# -- the simulator's shared arrays ---------------------------------------------------------------------------------


def _shared_array_from_one_line(shared, shape):
    return shared.array(shape, np.float32)  # every caller asks from this one line, as a block's threads do


def test_threads_of_a_simulated_block_get_one_shared_array_even_when_switched_mid_allocation():
    """The first thread is held inside the allocation (np.empty reads its shape) while a second thread asks for the
    same line's array: both must get the same array, or a block reduction folds memory nobody wrote."""
    from numba.cuda.simulator import kernelapi

    backend_module._make_simulated_shared_arrays_thread_safe()  # done at import on sim; here on every backend
    shared = kernelapi.FakeCUDAShared(0)
    first_inside, second_done = threading.Event(), threading.Event()

    class Length:
        def __init__(self, pause: bool) -> None:
            self.pause = pause

        def __index__(self) -> int:
            if self.pause:
                first_inside.set()
                second_done.wait(0.5)  # the interpreter runs the second thread here
            return 4

    got = {}

    def first() -> None:
        got[1] = _shared_array_from_one_line(shared, Length(pause=True))

    def second() -> None:
        got[2] = _shared_array_from_one_line(shared, Length(pause=False))
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_inside.wait(10)
    threads[1].start()
    for thread in threads:
        thread.join(10)
    assert got[1] is got[2]
    assert got[1].shape == (4,)


def test_simulated_shared_arrays_are_one_per_source_line():
    from numba.cuda.simulator import kernelapi

    backend_module._make_simulated_shared_arrays_thread_safe()
    shared = kernelapi.FakeCUDAShared(0)
    a = _shared_array_from_one_line(shared, 3)
    b = shared.array(3, np.float32)  # another line: another array
    assert _shared_array_from_one_line(shared, 3) is a
    assert b is not a
