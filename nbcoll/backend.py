"""Choose where kernels run: ``cuda`` (a real GPU), ``sim`` (Numba's CUDA simulator) or ``numpy``.

The choice must be made before ``numba.cuda`` is imported, because Numba reads ``NUMBA_ENABLE_CUDASIM`` once,
at import. So this module never imports ``numba.cuda`` itself; it finds a GPU by asking the CUDA driver directly
through ``ctypes``, and only then lets :func:`cuda` import Numba.

Example::

    import nbcoll
    nbcoll.get_backend()            # "cuda" where a GPU is found, else "sim"
    with nbcoll.use_backend("numpy"):
        ...                         # the NumPy references run instead of kernels

``NBCOLL_BACKEND=cuda|sim|numpy`` overrides the default. One process can switch between ``numpy`` and the
device backend it started with (``cuda`` or ``sim``), but never between ``cuda`` and ``sim``.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import ctypes.util
import os
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

BACKENDS = ("cuda", "sim", "numpy")

SIMULATOR_SWITCH_INTERVAL = 0.0005
"""Seconds a Python thread may hold the interpreter lock while another waits for it, during a simulated launch.

The simulator runs each CUDA thread of a block as a Python thread and releases them from ``syncthreads`` by
polling them from the launching thread. At Python's default of 5 ms that polling loop keeps the lock while the
threads it waits for cannot run, so kernels that synchronise often (reductions, softmax, norms) spend most of
their time there; a shorter interval halves their time."""


class BackendError(RuntimeError):
    """The requested backend cannot run in this process.

    >>> import nbcoll
    >>> from nbcoll.backend import device_backend
    >>> other = {"sim": "cuda", "cuda": "sim"}[device_backend()]     # the device backend this process lacks
    >>> try:
    ...     nbcoll.set_backend(other)
    ... except nbcoll.BackendError as error:
    ...     print(type(error).__name__, "-", str(error).split(":")[0])
    BackendError - set_backend(name)
    """


def gpu_count() -> int:
    """Number of CUDA devices the driver reports, or 0 when there is no driver or no GPU.

    Uses ``cuInit`` and ``cuDeviceGetCount`` from ``libcuda`` so that ``numba.cuda`` stays unimported.
    """
    names = [ctypes.util.find_library("cuda"), "libcuda.so.1", "libcuda.so", "nvcuda.dll"]
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if lib.cuInit(0) != 0:
            return 0
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    return 0


def _check_name(name: str, where: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{where}: unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return name


def _startup_backend() -> tuple[str, BackendError | None]:
    """The backend named by ``NBCOLL_BACKEND`` (or found), and the error to raise at first use if it is unknown.

    An unknown name does not fail the import, so that ``python -m nbcoll info`` can report it in one line; every
    use of a backend (:func:`get_backend`, :func:`cuda`) raises it instead.
    """
    requested = os.environ.get("NBCOLL_BACKEND", "").strip().lower()
    if requested and requested not in BACKENDS:
        expected = ", ".join(BACKENDS)
        return "sim", BackendError(f"NBCOLL_BACKEND: unknown backend {requested!r}; expected one of {expected}")
    if requested:
        return requested, None
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "sim", None
    return ("cuda" if gpu_count() > 0 else "sim"), None


def _enable_simulator_if_needed(name: str) -> None:
    """Set NUMBA_ENABLE_CUDASIM before numba.cuda is imported, and refuse if it is too late."""
    wants_sim = name == "sim"
    if "numba.cuda" in sys.modules:
        from numba import config

        if bool(config.ENABLE_CUDASIM) != wants_sim:
            raise BackendError(
                f"backend {name!r} needs NUMBA_ENABLE_CUDASIM={int(wants_sim)}, but numba.cuda was already "
                "imported with the other setting; import nbcoll before numba.cuda or set NBCOLL_BACKEND"
            )
        return
    if wants_sim:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    elif name == "cuda":
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
        # A collective's small chunks run as one or a few blocks on purpose; Numba would warn of low occupancy on
        # every such launch. Setting the variable to 1 brings the warning back.
        os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")


def _make_simulated_launches_thread_safe() -> None:
    """Let a communicator's progress thread launch kernels on the simulator while the main thread does too.

    The simulator keeps two things where threads share them: ``kernel[grid, block]`` stores the launch
    configuration on the kernel object itself, and the running launch lives in module-level state. Two threads
    launching the same kernel would run with each other's grid, or inside each other's launch. Here each
    ``kernel[grid, block]`` configures a copy, and launches take turns, as a GPU queues launches from any thread.
    Device functions, which the simulator calls from its own per-CUDA-thread threads during a launch, are not
    locked. During a launch the interpreter switches threads every :data:`SIMULATOR_SWITCH_INTERVAL` seconds.
    """
    from numba.cuda.simulator import kernel

    if getattr(kernel.FakeCUDAKernel, "_nbcoll_thread_safe", False):
        return
    configure, launch = kernel.FakeCUDAKernel.__getitem__, kernel.FakeCUDAKernel.__call__
    lock = threading.Lock()

    def configured_copy(self: Any, configuration: Any) -> Any:
        return configure(copy.copy(self), configuration)

    def call(self: Any, *args: Any) -> Any:
        if self._device:
            return launch(self, *args)
        with lock:
            interval = sys.getswitchinterval()
            sys.setswitchinterval(SIMULATOR_SWITCH_INTERVAL)
            try:
                return launch(self, *args)
            finally:
                sys.setswitchinterval(interval)

    kernel.FakeCUDAKernel.__getitem__ = configured_copy
    kernel.FakeCUDAKernel.__call__ = call
    kernel.FakeCUDAKernel._nbcoll_thread_safe = True
    _make_simulated_shared_arrays_thread_safe()


def _make_simulated_shared_arrays_thread_safe() -> None:
    """Give every thread of a simulated block the same ``cuda.shared.array``, as a GPU does.

    The simulator finds a block's shared array by the source line that asks for it: the first thread to get
    there makes the array and files it, and the others look it up. The look-up and the filing are two steps, and
    between them the interpreter may switch to another thread of the block, which then finds nothing and files
    an array of its own. Those two threads then write to different memory: a block reduction folds an
    uninitialised slot, and the result is wrong in a way that changes from run to run (rare: a few launches in
    ten minutes of a 4-rank training check, at a 0.5 ms switch interval). Here the look-up and the filing happen
    under one lock, and the caller's line is read from its frame, which is also cheaper than the simulator's
    formatted stack.
    Dynamic shared memory (``shape == 0``) is one buffer per block already and keeps the simulator's code.
    """
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared = kernelapi.FakeCUDAShared
    if getattr(shared, "_nbcoll_thread_safe", False):
        return
    simulator_array = shared.array
    lock = threading.Lock()

    def array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> Any:
        if shape == 0 or alignment is not None:  # dynamic shared memory; alignment, which the simulator refuses
            return simulator_array(self, shape, dtype, alignment)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        line = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            found = self._allocations.get(line)
            if found is None:
                found = self._allocations[line] = np.empty(shape, dtype)
        return found

    shared.array = array
    shared._nbcoll_thread_safe = True


_startup, _startup_error = _startup_backend()
# The device backend this process can use: cuda or sim (numpy mode still imports the simulator so that kernels
# can be defined and switched to in tests).
_device_backend = "cuda" if _startup == "cuda" else "sim"
_enable_simulator_if_needed(_device_backend)
if _device_backend == "sim":
    _make_simulated_launches_thread_safe()
    from nbcoll import simulated_blocks

    simulated_blocks.install()  # blocks whose threads never meet run in the launching thread, without threads
_current = _startup


def get_backend() -> str:
    """The backend in use: ``"cuda"``, ``"sim"`` or ``"numpy"``.

    >>> import nbcoll
    >>> nbcoll.get_backend()                 # the examples run on the NumPy references
    'numpy'
    """
    if _startup_error is not None:
        raise _startup_error
    return _current


def device_backend() -> str:
    """The kernel-running backend this process was started with: ``"cuda"`` or ``"sim"``."""
    return _device_backend


def set_backend(name: str) -> None:
    """Switch the backend of this process between ``numpy`` and its device backend.

    >>> import nbcoll
    >>> nbcoll.set_backend("numpy")          # from here on, every kernel runs its NumPy reference
    >>> nbcoll.get_backend()
    'numpy'
    """
    global _current
    _check_name(name, "set_backend(name)")
    if name != "numpy" and name != _device_backend:
        raise BackendError(
            f"set_backend(name): this process started on {_device_backend!r}; it can switch to 'numpy' or "
            f"{_device_backend!r} but not {name!r}. Start a new process with NBCOLL_BACKEND={name}."
        )
    _current = name


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
    """Run a block on another backend, then switch back.

    >>> import nbcoll
    >>> with nbcoll.use_backend("numpy"):
    ...     print(nbcoll.get_backend())
    numpy
    """
    previous = _current
    set_backend(name)
    try:
        yield name
    finally:
        set_backend(previous)


_gpu_checked = False


def cuda() -> ModuleType:
    """``numba.cuda``, imported only when a kernel is first needed.

    On the ``cuda`` backend the first call also selects this process's GPU (:func:`select_device`). With no
    usable GPU it raises :class:`BackendError` naming the other backends.
    """
    if _startup_error is not None:
        raise _startup_error
    from numba import cuda as numba_cuda

    if _device_backend == "cuda" and not _gpu_checked:
        select_device()
    return numba_cuda


def select_device(local_rank: int | None = None) -> int | None:
    """On ``cuda``: make GPU ``local_rank % device count`` current for this process; return its number.

    It must run before anything is allocated on the GPU, so :func:`cuda` calls it first, with the local rank the
    launcher announced (see :mod:`nbcoll.device`); the communicator calls it with the rank it measured, which
    counts only when nothing chose a GPU before. Returns ``None`` on ``sim``, where there is no GPU to choose.
    """
    global _gpu_checked
    if _device_backend != "cuda":
        return None
    from numba import cuda as numba_cuda

    from nbcoll import device

    if not _gpu_checked and not numba_cuda.is_available():
        raise BackendError(
            "backend 'cuda' was chosen but no CUDA GPU or driver was found; "
            "use NBCOLL_BACKEND=sim (the same kernels on Numba's simulator) or NBCOLL_BACKEND=numpy "
            "(the NumPy references)"
        )
    chosen = device.select(numba_cuda, local_rank)
    _gpu_checked = True
    return chosen


def is_simulator() -> bool:
    return _device_backend == "sim"
