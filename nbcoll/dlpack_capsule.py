"""DLPack capsules written and read by hand, for device arrays that do not speak DLPack themselves.

NumPy writes and reads DLPack on its own; a Numba CUDA device array does neither. This module holds the C structs
of the DLPack header (``dlpack.h``: ``DLDevice``, ``DLDataType``, ``DLTensor`` and the unversioned
``DLManagedTensor``) and the two halves of the exchange:

* :func:`export` wraps a pointer, shape, strides and dtype in a ``"dltensor"`` capsule. The capsule keeps the
  array that owns the memory alive until the consumer calls the managed tensor's ``deleter`` (or until the
  capsule dies unused, when its destructor calls the deleter instead).
* :func:`describe` reads a ``"dltensor"`` capsule: its memory as an array-interface dict (the keys NumPy's
  ``__array_interface__`` and ``__cuda_array_interface__`` share), its dtype and its device, renames the capsule
  ``"used_dltensor"`` so that nobody consumes it twice, and returns the function that releases it.

Both are bookkeeping over a pointer, the same for host and device memory, so they are checked on the CPU.

Example::

    >>> import numpy as np
    >>> host = np.arange(6, dtype=np.int32).reshape(2, 3)
    >>> pointer = host.__array_interface__["data"][0]
    >>> capsule = export(pointer, host.shape, host.strides, host.dtype, (CPU, 0), owner=host)
    >>> interface, dtype, device, release = describe(capsule)
    >>> interface["shape"], dtype, device
    ((2, 3), dtype('int32'), (1, 0))
    >>> release()
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

CPU, CUDA, CUDA_HOST = 1, 2, 3
"""DLPack device types (``DLDeviceType``): host memory, CUDA device memory, CUDA pinned host memory."""

_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6  # DLDataTypeCode
_CODES = {"i": _INT, "u": _UINT, "f": _FLOAT, "b": _BOOL}

try:  # NumPy has no bfloat16; ml_dtypes gives it one, which NumPy's own DLPack cannot carry
    import ml_dtypes

    BFLOAT16: np.dtype | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BFLOAT16 = None
_NAME, _USED_NAME = b"dltensor", b"used_dltensor"  # module constants: a capsule keeps a pointer to its name


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # in elements, not bytes; NULL means C-contiguous
        ("byte_offset", ctypes.c_uint64),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*deleter)(DLManagedTensor *self)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]  # a raw pointer: a dying capsule has no references
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]

_EXPORTED: dict[int, tuple[Any, ...]] = {}
"""Address of each managed tensor handed out -> the struct, its shape and strides, and the owner of the memory."""


@_DELETER
def _delete(address: int | None) -> None:
    # Called by the consumer when it is done with the memory: the owner may go now.
    _EXPORTED.pop(address or 0, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_died(capsule: int | None) -> None:
    # A capsule nobody consumed still holds the owner; a consumed one was renamed and is the consumer's concern.
    if capsule and _capsule_is_valid(capsule, _NAME):
        _delete(_capsule_pointer_raw(capsule, _NAME))


def dl_dtype(dtype: Any) -> DLDataType:
    """The DLPack type of a NumPy dtype: ``float32`` is ``(code 2, 32 bits, 1 lane)``.

    >>> t = dl_dtype(np.float32)
    >>> t.code, t.bits, t.lanes
    (2, 32, 1)
    """
    dtype = np.dtype(dtype)
    if dtype == BFLOAT16:
        return DLDataType(_BFLOAT, 16, 1)
    if dtype.kind not in _CODES:
        raise TypeError(f"dtype: {dtype} has no DLPack type; expected a signed, unsigned, floating or bool dtype")
    return DLDataType(_CODES[dtype.kind], dtype.itemsize * 8, 1)


def numpy_dtype(dl: DLDataType) -> np.dtype:
    """The NumPy dtype of a DLPack type (bfloat16 as ``ml_dtypes``' one); others NumPy lacks raise ``TypeError``.

    >>> numpy_dtype(DLDataType(1, 8, 1))
    dtype('uint8')
    """
    if (dl.code, dl.bits, dl.lanes) == (_BFLOAT, 16, 1) and BFLOAT16 is not None:
        return BFLOAT16
    kinds = {code: kind for kind, code in _CODES.items()}
    if dl.code in kinds and dl.lanes == 1 and dl.bits % 8 == 0:
        try:
            return np.dtype(f"{kinds[dl.code]}{dl.bits // 8}")
        except TypeError:
            pass
    raise TypeError(
        f"obj.dtype: DLPack type (code {dl.code}, {dl.bits} bits, {dl.lanes} lanes) has no NumPy dtype; "
        "expected an int, uint, float or bool type of one lane"
    )


def export(
    pointer: int,
    shape: Sequence[int],
    strides: Sequence[int],
    dtype: Any,
    device: tuple[int, int],
    owner: Any,
) -> Any:
    """A ``"dltensor"`` capsule for the memory at ``pointer`` (``strides`` in bytes), on ``device`` =
    ``(device type, device id)``; ``owner`` stays alive until the consumer releases the capsule.

    >>> host = np.zeros(3, np.float64)
    >>> capsule = export(host.ctypes.data, host.shape, host.strides, host.dtype, (CPU, 0), owner=host)
    >>> type(capsule).__name__
    'PyCapsule'
    """
    dtype = np.dtype(dtype)
    ndim = len(shape)
    if any(int(s) % dtype.itemsize for s in strides):
        raise ValueError(f"strides: {tuple(strides)} are not multiples of the item size {dtype.itemsize}")
    shape_c = (ctypes.c_int64 * max(ndim, 1))(*(int(n) for n in shape))
    strides_c = (ctypes.c_int64 * max(ndim, 1))(*(int(s) // dtype.itemsize for s in strides))
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(
        pointer or None,
        DLDevice(*device),
        ndim,
        dl_dtype(dtype),
        ctypes.cast(shape_c, ctypes.POINTER(ctypes.c_int64)),
        ctypes.cast(strides_c, ctypes.POINTER(ctypes.c_int64)),
        0,
    )
    managed.deleter = _delete
    address = ctypes.addressof(managed)
    _EXPORTED[address] = (managed, shape_c, strides_c, owner)
    return _capsule_new(address, _NAME, ctypes.cast(_capsule_died, ctypes.c_void_p))


def describe(capsule: Any) -> tuple[dict, np.dtype, tuple[int, int], Callable[[], None]]:
    """``(interface, dtype, (device type, device id), release)`` of an unused ``"dltensor"`` capsule, which it
    marks used.

    ``interface`` has ``shape``, ``strides`` (bytes, or ``None`` when C-contiguous), ``typestr``, ``data`` and
    ``version``; ``dtype`` is the NumPy dtype (its ``typestr`` cannot name bfloat16, ``dtype`` can); call
    ``release()`` once when the memory is no longer read.

    >>> host = np.arange(4.0)
    >>> interface, _, device, release = describe(export(host.ctypes.data, (4,), (8,), host.dtype, (CPU, 0), host))
    >>> interface["data"][0] == host.ctypes.data, interface["strides"]
    (True, (8,))
    >>> release()
    """
    if type(capsule).__name__ != "PyCapsule" or not _capsule_is_valid(id(capsule), _NAME):
        raise TypeError(f"obj: __dlpack__() should return an unused 'dltensor' capsule, got {capsule!r}")
    address = _capsule_pointer(capsule, _NAME)
    managed = DLManagedTensor.from_address(address)
    tensor = managed.dl_tensor
    dtype = numpy_dtype(tensor.dtype)
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    strides = None
    if tensor.strides:
        strides = tuple(int(tensor.strides[i]) * dtype.itemsize for i in range(tensor.ndim))
    interface = {
        "shape": shape,
        "strides": strides,
        "typestr": dtype.str,
        "data": ((tensor.data or 0) + tensor.byte_offset, False),
        "version": 3,
    }
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    _capsule_set_name(capsule, _USED_NAME)
    deleter = managed.deleter

    def release() -> None:
        if deleter:
            deleter(address)

    return interface, dtype, device, release
