"""Device memory on every backend: ``to_device``, ``to_host``, ``empty``, ``zeros``, ``synchronize``.

A *device array* is what kernels take:

========== ===================================================================================
backend    device array
========== ===================================================================================
``cuda``   a Numba ``DeviceNDArray``; anything with ``__cuda_array_interface__`` (CuPy, PyTorch)
           is wrapped without a copy
``sim``    the simulator's ``FakeCUDAArray`` (host memory that kernels treat as device memory)
``numpy``  a plain ``numpy.ndarray``
========== ===================================================================================

Example::

    >>> import numpy as np, nbcoll
    >>> x = nbcoll.to_device(np.arange(5, dtype=np.float32))
    >>> y = nbcoll.zeros(5, np.float32)
    >>> nbcoll.to_host(x)
    array([0., 1., 2., 3., 4.], dtype=float32)
    >>> nbcoll.to_host(y)
    array([0., 0., 0., 0., 0.], dtype=float32)

Every array these functions create is counted (:func:`stats`): the bytes alive now and the peak since
:func:`reset_peak_stats`, on every backend, so that memory per rank is measured rather than estimated.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from nbcoll import backend

DTYPES = tuple(
    np.dtype(name) for name in ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64")
)
"""The element types every kernel and collective supports, as NCCL does; see also :data:`LOW_PRECISION_DTYPES`."""

bfloat16 = np.dtype(ml_dtypes.bfloat16)
"""The ``ml_dtypes`` NumPy dtype bfloat16 (1 sign, 8 exponent, 7 mantissa bits), exported as ``nbcoll.bfloat16``."""
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
"""The ``ml_dtypes`` NumPy dtype float8_e4m3fn (1, 4, 3 bits; no inf), exported as ``nbcoll.float8_e4m3fn``."""
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
"""The ``ml_dtypes`` NumPy dtype float8_e5m2 (1, 5, 2 bits), exported as ``nbcoll.float8_e5m2``."""

LOW_PRECISION_DTYPES = (bfloat16, float8_e4m3fn, float8_e5m2)
"""Storage types: arrays, Tensors and every collective accept them, and kernels read them as unsigned words
(:data:`WORD_DTYPES`), converting to float32 for any arithmetic (:mod:`nbcoll.kernels.low_precision`). Only
``astype``, the copies and the collectives' reduce steps compute on them."""

WORD_DTYPES = {bfloat16: np.dtype(np.uint16), float8_e4m3fn: np.dtype(np.uint8), float8_e5m2: np.dtype(np.uint8)}
"""Each low-precision dtype and the unsigned word a kernel reads it as."""

_ACCEPTED = frozenset(DTYPES + LOW_PRECISION_DTYPES)


def words(x: Any) -> Any:
    """The same memory as the low-precision device array ``x``, seen as its unsigned words, without a copy.

    >>> import numpy as np, nbcoll
    >>> nbcoll.memory.words(nbcoll.to_device(np.array([1.0, -2.0], nbcoll.bfloat16)))
    array([16256, 49152], dtype=uint16)
    """
    return x.view(WORD_DTYPES[x.dtype])


def check_dtype(dtype: Any, arg: str = "dtype", allow_bool: bool = False) -> np.dtype:
    """Return ``numpy.dtype(dtype)`` or raise ``TypeError`` naming ``arg`` when nbcoll does not support it.

    ``bool`` is accepted only where ``allow_bool`` says so: comparison results and masks, never reductions.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{arg}: {dtype!r} is not a dtype") from exc
    if dt not in _ACCEPTED and not (allow_bool and dt == np.bool_):
        expected = ", ".join(map(str, DTYPES + LOW_PRECISION_DTYPES))
        raise TypeError(f"{arg}: dtype {dt} is not supported; expected one of {expected}")
    return dt


def _shape(shape: Any) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(int(s) < 0 for s in shape):
        raise ValueError(f"shape: dimensions must be >= 0, got {shape}")
    return tuple(int(s) for s in shape)


def _is_numba_device_array(x: Any) -> bool:
    if backend.device_backend() == "sim":
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return isinstance(x, FakeCUDAArray)
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return isinstance(x, DeviceNDArray)


def _row_major_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _copy_to_device(host: np.ndarray) -> Any:
    """``host`` copied into a new ``cuda`` or ``sim`` device array.

    NumPy gives an empty array zero strides, and numba-cuda reads those as a one-element extent at a NULL
    pointer, so that even ``x[0:0]`` raises "non-empty slice into empty slice" on a GPU. There an empty array is
    allocated with numba-cuda's own row-major strides instead; it has nothing to copy.
    """
    if host.size == 0 and backend.get_backend() == "cuda":
        return backend.cuda().device_array(host.shape, host.dtype)
    return backend.cuda().to_device(host)


def array_backend(x: Any) -> str | None:
    """The backend whose device array ``x`` is: ``"cuda"``, ``"sim"``, ``"numpy"``, or ``None``."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if _is_numba_device_array(x):
        return backend.device_backend()
    if backend.device_backend() == "cuda" and hasattr(x, "__cuda_array_interface__"):
        return "cuda"
    return None


def is_device_array(x: Any) -> bool:
    """True when ``x`` is a device array of the current backend."""
    return array_backend(x) == backend.get_backend()


def as_device_array(x: Any, arg: str = "array") -> Any:
    """Return ``x`` as a device array of the current backend, or raise ``TypeError`` naming ``arg``.

    On ``cuda`` an object with ``__cuda_array_interface__`` is wrapped without a copy. Nothing is ever copied
    between host and device here: that is what :func:`to_device` is for.
    """
    current = backend.get_backend()
    found = array_backend(x)
    if found == current:
        if current == "cuda" and not _is_numba_device_array(x):
            x = backend.cuda().as_cuda_array(x)
        if current == "cuda" and x.size == 0 and x.strides != _row_major_strides(x.shape, x.dtype.itemsize):
            return backend.cuda().device_array(x.shape, x.dtype)  # zero strides: see _copy_to_device
        return x
    what = type(x).__name__ if found is None else f"a {found!r}-backend array ({type(x).__name__})"
    raise TypeError(
        f"{arg}: expected a device array of the {current!r} backend, got {what}; "
        "use nbcoll.to_device() to copy host data to the device"
    )


# -- accounting: nbcoll.memory_accounting counts what the functions below allocate ----------------------------

from nbcoll.memory_accounting import MemoryStats, _counter, reset_peak_stats, stats, track  # noqa: E402, F401

# -- allocation ------------------------------------------------------------------------------------------------


def to_device(array: Any, dtype: Any = None) -> Any:
    """Copy host data to a new device array; device arrays of the current backend are returned as they are.

    >>> import numpy as np, nbcoll
    >>> x = nbcoll.to_device(np.arange(3), dtype=np.float32)      # a numpy.ndarray on the numpy backend
    >>> x.dtype, nbcoll.to_host(x)
    (dtype('float32'), array([0., 1., 2.], dtype=float32))
    """
    current = backend.get_backend()
    if array_backend(array) == current and current != "numpy" and dtype is None:
        return as_device_array(array)
    host = np.ascontiguousarray(array, dtype=dtype)
    check_dtype(host.dtype, "array.dtype", allow_bool=True)
    if current == "numpy":
        return track(host.copy() if host is array or host.base is not None else host)
    return track(_copy_to_device(host))


def to_host(array: Any) -> np.ndarray:
    """Copy a device array (or anything array-like) into a new ``numpy.ndarray``.

    >>> import numpy as np, nbcoll
    >>> nbcoll.to_host(nbcoll.to_device(np.array([1, 2])))
    array([1, 2])
    """
    if isinstance(array, np.ndarray):
        return array.copy()
    found = array_backend(array)
    if found in ("cuda", "sim"):
        if not _is_numba_device_array(array):
            array = backend.cuda().as_cuda_array(array)
        return array.copy_to_host()
    return np.array(array)


def empty(shape: Any, dtype: Any = np.float32) -> Any:
    """A new uninitialised device array.

    >>> import numpy as np, nbcoll
    >>> x = nbcoll.empty((2, 3), np.int32)          # values not set: write before reading
    >>> x.shape, x.dtype
    ((2, 3), dtype('int32'))
    """
    shape, dt = _shape(shape), check_dtype(dtype, allow_bool=True)
    if backend.get_backend() == "numpy":
        return track(np.empty(shape, dt))
    return track(backend.cuda().device_array(shape, dt))


def zeros(shape: Any, dtype: Any = np.float32) -> Any:
    """A new device array of zeros.

    >>> import nbcoll
    >>> nbcoll.to_host(nbcoll.zeros(3))
    array([0., 0., 0.], dtype=float32)
    """
    shape, dt = _shape(shape), check_dtype(dtype, allow_bool=True)
    if backend.get_backend() == "numpy":
        return track(np.zeros(shape, dt))
    return track(_copy_to_device(np.zeros(shape, dt)))


def communicator_zeros(shape: Any, dtype: Any = np.float32) -> Any:
    """Zeros that :func:`stats` does not count: scratch a communicator keeps for as long as it lives.

    A communicator's FIFOs and windows are shared segments outside these counts, as NCCL's own buffers are outside
    a framework's allocator; its private scratch is left out too, so that ``stats()`` measures what a model and
    its optimizer hold, whichever collectives have run.

    >>> import nbcoll
    >>> before = nbcoll.memory.stats().allocated_bytes
    >>> scratch = nbcoll.memory.communicator_zeros(1024, "uint32")
    >>> nbcoll.memory.stats().allocated_bytes - before
    0
    """
    shape, dt = _shape(shape), check_dtype(dtype, allow_bool=True)
    if backend.get_backend() == "numpy":
        return np.zeros(shape, dt)
    return _copy_to_device(np.zeros(shape, dt))


def synchronize() -> None:
    """Wait until every kernel and copy this process launched has finished (nothing to wait for off the GPU).

    Kernels run asynchronously on a GPU. Call this before telling another process (a barrier, a flag) that
    memory it shares with this one holds what a kernel wrote.

    >>> import numpy as np, nbcoll
    >>> x = nbcoll.to_device(np.ones(4, np.float32))
    >>> nbcoll.synchronize()                       # every launch and copy before this line has finished
    """
    if backend.get_backend() == "cuda":
        backend.cuda().synchronize()


def is_contiguous(x: Any) -> bool:
    """True when ``x`` is C-contiguous (a device or host array)."""
    if isinstance(x, np.ndarray):
        return bool(x.flags.c_contiguous)
    return bool(x.is_c_contiguous())


def require_contiguous(x: Any, arg: str) -> None:
    """Raise ``ValueError`` naming ``arg`` when ``x`` is not C-contiguous."""
    if not is_contiguous(x):
        raise ValueError(f"{arg}: must be C-contiguous (got strides {x.strides} for shape {x.shape}); copy it first")


def contiguous_input(x: Any, arg: str, allow_bool: bool = False) -> Any:
    """``x`` as a C-contiguous device array of a supported dtype: the check every kernel's entry makes.

    Errors name ``arg``: ``TypeError`` for what is not an array or has another dtype, ``ValueError`` for strides.
    """
    x = as_device_array(x, arg)
    check_dtype(x.dtype, f"{arg}.dtype", allow_bool=allow_bool)
    require_contiguous(x, arg)
    return x


def is_writable(x: Any) -> bool:
    """Whether the device array ``x`` can be written: its flag, or its ``__cuda_array_interface__``'s."""
    host = x if isinstance(x, np.ndarray) else getattr(x, "_ary", None)  # the simulator's arrays wrap an ndarray
    if host is not None:
        return bool(host.flags.writeable)
    interface = getattr(x, "__cuda_array_interface__", None)
    return not (interface and interface["data"][1])


def require_writable(x: Any, arg: str) -> None:
    """Raise ``ValueError`` naming ``arg`` when the device array ``x`` cannot be written (an output buffer)."""
    if not is_writable(x):
        raise ValueError(f"{arg}: is read-only, but this call writes its result there; pass a writable array")


def address_range(x: Any) -> tuple[int, int]:
    """The bytes ``[start, end)`` that a contiguous device array occupies, to tell aliasing arrays apart."""
    nbytes = int(x.size) * x.dtype.itemsize
    if isinstance(x, np.ndarray):
        start = x.__array_interface__["data"][0]
    elif backend.device_backend() == "sim":
        start = x._ary.__array_interface__["data"][0]
    else:
        start = x.device_ctypes_pointer.value or 0
    return start, start + nbytes


def same_memory(a: Any, b: Any) -> bool:
    """True when two device arrays occupy exactly the same bytes (an in-place copy, which needs no copy)."""
    return a.size == b.size and not _surely_apart(a, b) and address_range(a) == address_range(b)


def overlaps(a: Any, b: Any) -> bool:
    """True when two device arrays share at least one byte."""
    if _surely_apart(a, b):
        return False
    (a0, a1), (b0, b1) = address_range(a), address_range(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


def _surely_apart(a: Any, b: Any) -> bool:
    # NumPy's own bounds test, a fifth of the cost of reading two addresses: these checks run once per chunk.
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and not np.may_share_memory(a, b)
