"""CUDA IPC handles as plain bytes: what crosses a process boundary when device memory is shared.

The driver describes an exportable allocation with a ``CUipcMemHandle``: a C struct of 64 opaque bytes
(``char reserved[64]``). The process that owns the memory asks for it (``cuIpcGetMemHandle``), sends the bytes to
a peer on the same machine, and the peer maps the same memory (``cuIpcOpenMemHandle``).

nbcoll never pickles Numba's own handle objects: how they serialise has followed the ``cuda-bindings`` release
(the struct's ``reserved`` field is not exposed to Python from cuda-bindings 13.4 on). Instead
:class:`CudaIpcHandle` carries the 64 raw bytes, read and written through the struct's address
(``getPtr()``), which every cuda-bindings release offers, together with the allocation's size, the offset of
the array in it, and the identity of the GPU that owns it.

Example::

    exported = export_array(device_array)               # in the owner: a small, picklable CudaIpcHandle
    send_to_peer(exported)                              # MPI, a pipe...
    array, mapping = open_array(exported, (n,), dtype)  # in the peer: the same memory
    mapping.close()                                     # when done
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcoll import backend

HANDLE_BYTES = 64
"""``CU_IPC_HANDLE_SIZE``: the size of a ``CUipcMemHandle``."""


def handle_to_bytes(handle: Any) -> bytes:
    """The 64 raw bytes of a CUDA IPC handle.

    Accepts a ``cuda.bindings.driver.CUipcMemHandle`` of any release (read at ``getPtr()``), an object with the
    older ``reserved`` attribute, or anything ``bytes()`` takes (a ctypes ``c_byte * 64``, ``bytes``).
    """
    get_ptr = getattr(handle, "getPtr", None)
    if get_ptr is not None:
        raw = ctypes.string_at(int(get_ptr()), HANDLE_BYTES)
    elif hasattr(handle, "reserved"):
        raw = bytes(handle.reserved)
    else:
        raw = bytes(handle)
    if len(raw) != HANDLE_BYTES:
        raise ValueError(f"handle: expected {HANDLE_BYTES} bytes, got {len(raw)} from {type(handle).__name__}")
    return raw


def handle_from_bytes(raw: bytes, handle_type: Any = None) -> Any:
    """A new ``CUipcMemHandle`` (or ``handle_type()``) holding ``raw``, the 64 bytes of :func:`handle_to_bytes`.

    The bytes are written at the struct's address, so this works whether or not the release exposes
    ``reserved``. Imports ``cuda.bindings`` only, which needs no GPU.
    """
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != HANDLE_BYTES:
        what = f"{len(raw)} bytes" if isinstance(raw, (bytes, bytearray)) else type(raw).__name__
        raise ValueError(f"raw: expected the {HANDLE_BYTES} bytes of a CUDA IPC handle, got {what}")
    if handle_type is None:
        from cuda.bindings import driver

        handle_type = driver.CUipcMemHandle
    handle = handle_type()
    ctypes.memmove(int(handle.getPtr()), bytes(raw), HANDLE_BYTES)
    return handle


@dataclass(frozen=True)
class CudaIpcHandle:
    """What a peer needs to map device memory that another process owns: plain data, safe to pickle.

    Example::

        exported = export_array(x)      # CudaIpcHandle(raw=b'...', size=1024, offset=0, source_info=(...))
    """

    raw: bytes
    """The 64 bytes of the allocation's ``CUipcMemHandle``."""
    size: int
    """Bytes of the exported memory, from ``offset``."""
    offset: int = 0
    """Where the exported memory starts inside the allocation the handle names."""
    source_info: tuple[tuple[str, int], ...] | None = None
    """The owner's GPU as Numba identifies it (``pci_domain_id``, ``pci_bus_id``, ``pci_device_id``), as pairs so
    that the handle stays hashable."""

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != HANDLE_BYTES:
            raise ValueError(f"raw: expected {HANDLE_BYTES} bytes, got {self.raw!r:.40}")
        if self.size < 0 or self.offset < 0:
            raise ValueError(f"size and offset: expected >= 0, got size={self.size}, offset={self.offset}")

    def numba_handle(self) -> Any:
        """This handle as Numba's ``IpcHandle`` (not yet opened), rebuilt from the bytes in this process."""
        from numba.cuda.cudadrv import driver

        handle = handle_from_bytes(self.raw)
        source_info = dict(self.source_info) if self.source_info is not None else None
        return driver.IpcHandle(None, handle, self.size, source_info=source_info, offset=self.offset)


def export_array(array: Any) -> CudaIpcHandle:
    """The :class:`CudaIpcHandle` of a contiguous Numba device array's memory (owner side, ``cuda`` only)."""
    cuda = backend.cuda()
    exported = cuda.current_context().get_ipc_handle(array.gpu_data)
    return CudaIpcHandle(
        raw=handle_to_bytes(exported.handle),
        size=int(exported.size),
        offset=int(exported.offset),
        source_info=tuple(sorted(exported.source_info.items())) if exported.source_info is not None else None,
    )


def open_array(exported: CudaIpcHandle, count: int, dtype: Any) -> tuple[Any, Any]:
    """Map a peer's memory as a 1-D device array of ``count`` elements; return it and the mapping to close.

    The memory is mapped directly (peer access), never copied: a staged copy would not see the owner's later
    writes. A GPU that cannot reach the owner's GPU gets a ``RuntimeError`` that says so.
    """
    if not isinstance(exported, CudaIpcHandle):
        raise TypeError(f"exported: expected a CudaIpcHandle, got {type(exported).__name__}")
    dtype = np.dtype(dtype)
    if count * dtype.itemsize > exported.size:
        raise ValueError(
            f"count: {count} elements of {dtype} need {count * dtype.itemsize} bytes; the handle holds {exported.size}"
        )
    cuda = backend.cuda()
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    mapping = exported.numba_handle()
    try:
        pointer = mapping.open_direct(cuda.current_context())
    except Exception as exc:
        raise RuntimeError(
            f"open_array: could not map the peer's GPU memory (owner's GPU {dict(exported.source_info or ())}, "
            f"this process's GPU {cuda.get_current_device().id}): {exc}. CUDA IPC needs both processes on one GPU "
            "or GPUs with peer access; otherwise use NBCOLL_TRANSPORT=mpi"
        ) from exc
    array = DeviceNDArray(shape=(count,), strides=(dtype.itemsize,), dtype=dtype, gpu_data=pointer)
    return array, mapping
