"""Backend choice and device memory on every backend."""

import os
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

import nbcoll
from nbcoll import backend as backend_module
from nbcoll import memory


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    chosen_here = ("NBCOLL_BACKEND", "NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS")
    full_env = {k: v for k, v in os.environ.items() if k not in chosen_here}
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


def test_the_cuda_backend_silences_numbas_low_occupancy_warning_unless_asked_for():
    code = "import os, nbcoll; nbcoll.get_backend(); print(os.environ.get('NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS'))"
    assert _python(code, NBCOLL_BACKEND="cuda").stdout.split() == ["0"]
    assert _python(code, NBCOLL_BACKEND="cuda", NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="1").stdout.split() == ["1"]
    assert _python(code, NBCOLL_BACKEND="sim").stdout.split() == ["None"]


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


def test_numba_cuda_reads_the_zero_strides_of_numpys_empty_arrays_as_one_element():
    # The hazard the next test guards against, shown with the real driver's own extent rule (no GPU needed).
    code = (
        "import numpy as np\n"
        "from numba.cuda.cudadrv import dummyarray\n"
        "def extent(x): return tuple(dummyarray.Array.from_desc(0, x.shape, x.strides, x.itemsize)[0:0].extent)\n"
        "print(np.zeros(0, np.float32).strides, extent(np.zeros(0, np.float32)),"
        " extent(np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (0,), (4,))))"
    )
    proc = _python(code, NBCOLL_BACKEND="numpy", NUMBA_ENABLE_CUDASIM="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["(0,)", "(0,", "4)", "(0,", "0)"], proc.stdout


EMPTY_SHAPES = [(0,), (0, 3), (3, 0), (2, 0, 5)]


def _row_major(shape, itemsize=4):
    return tuple(itemsize * int(np.prod(shape[i + 1 :])) for i in range(len(shape)))


def _every_way_to_an_empty_device_array(shape):
    from numba import cuda

    return {
        "zeros": lambda: nbcoll.zeros(shape),
        "empty": lambda: nbcoll.empty(shape),
        "to_device": lambda: nbcoll.to_device(np.zeros(shape, np.float32)),
        "to_device of a cast": lambda: nbcoll.to_device(np.zeros(shape, np.int8), dtype=np.float32),
        "communicator_zeros": lambda: memory.communicator_zeros(shape),
        "as_device_array": lambda: memory.as_device_array(cuda.to_device(np.zeros(shape, np.float32))),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_empty_arrays_on_a_gpu_have_row_major_strides_and_slice(shape):
    for how, make in _every_way_to_an_empty_device_array(shape).items():
        x = make()
        assert tuple(x.shape) == shape and tuple(x.strides) == _row_major(shape), (how, x.strides)
        assert x[0:0].size == 0 and nbcoll.to_host(x).size == 0, how


class _StandInCuda:
    """Records which numba-cuda allocator each entry point chose, in place of a GPU."""

    def __init__(self):
        self.calls = []

    def device_array(self, shape, dtype):
        self.calls.append("device_array")
        return cuda_like(np.zeros(shape, dtype), _row_major(shape, np.dtype(dtype).itemsize))

    def to_device(self, host):
        self.calls.append("to_device")
        return cuda_like(host.copy(), host.strides)


def cuda_like(array, strides):
    return types.SimpleNamespace(shape=array.shape, dtype=array.dtype, size=array.size, strides=tuple(strides))


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_on_cuda_empty_arrays_get_numba_cudas_own_strides_not_numpys_zero_strides(shape, monkeypatch):
    stand_in = _StandInCuda()
    monkeypatch.setattr(memory.backend, "get_backend", lambda: "cuda")
    monkeypatch.setattr(memory.backend, "cuda", lambda: stand_in)
    monkeypatch.setattr(memory, "track", lambda array: array)
    for make in (lambda: memory.zeros(shape), lambda: memory.to_device(np.zeros(shape, np.float32))):
        assert make().strides == _row_major(shape)
    monkeypatch.setattr(memory, "array_backend", lambda x: "cuda")
    monkeypatch.setattr(memory, "_is_numba_device_array", lambda x: True)
    assert memory.as_device_array(cuda_like(np.zeros(shape, np.float32), (0,) * len(shape))).strides == _row_major(
        shape
    )
    assert stand_in.calls == ["device_array"] * 3
    assert memory.zeros((2, 3)).strides == (12, 4) and stand_in.calls[-1] == "to_device"


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
