"""Sharing memory with PyTorch, NumPy, CuPy or JAX through DLPack: ``nbcoll.from_dlpack`` and ``Tensor.__dlpack__``.

DLPack hands over a pointer, a shape, strides and a dtype, never a copy: after ``y = torch.from_dlpack(x)`` a
write through ``y`` is seen in ``x`` and the other way round. Only the values travel; gradients, ``grad_fn`` and
``requires_grad`` do not (as in PyTorch, a tensor that requires grad is refused: export ``x.detach()``).

Example::

    >>> import numpy as np, nbcoll
    >>> host = np.arange(4, dtype=np.float32)
    >>> x = nbcoll.from_dlpack(host)        # on the numpy backend: the same memory, no copy
    >>> host[0] = 10.0
    >>> x.numpy()
    array([10.,  1.,  2.,  3.], dtype=float32)

What is shared on each backend:

========== ======================================================================================================
backend    memory
========== ======================================================================================================
``numpy``  host memory, through NumPy's own ``__dlpack__`` and ``numpy.from_dlpack``
``sim``    host memory too: the simulator's device arrays wrap NumPy arrays, so they export as CPU tensors
           (``__dlpack_device__()`` is ``(1, 0)``) and a CPU tensor is wrapped as a simulator array, both without
           a copy; a tensor on a GPU is refused with a ``BufferError``
``cuda``   CUDA device memory: a Numba device array is exported as a capsule written by
           :mod:`nbcoll.dlpack_capsule`; an object with ``__cuda_array_interface__`` (PyTorch, CuPy) is wrapped
           by Numba, one with only ``__dlpack__`` is read from its capsule
========== ======================================================================================================

nbcoll's kernels take C-contiguous arrays, so ``from_dlpack`` of a strided view (``t.T``, ``t[:, ::2]``)
copies it when ``copy`` is ``None`` (the array API's rule: share when possible, else copy) and raises
``BufferError`` when ``copy=False``. Exports keep their strides: every DLPack consumer reads strided memory.
Every dtype of nbcoll travels, bool included; bfloat16 (``ml_dtypes``' dtype, which NumPy's DLPack cannot carry)
goes through :mod:`nbcoll.dlpack_capsule` on every backend. The float8 types do not travel: NumPy refuses them.

This module gives :class:`~nbcoll.tensors.tensor.Tensor` its ``__dlpack__`` and ``__dlpack_device__`` (the
Tensor's core imports nothing above it; :mod:`nbcoll.tensors` imports this module so that every Tensor has them).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from nbcoll import backend, memory
from nbcoll.dlpack_capsule import BFLOAT16, CPU, CUDA, CUDA_HOST, describe, export
from nbcoll.tensors.arrays import from_host
from nbcoll.tensors.tensor import Tensor

_DEVICE_NAMES = {CPU: "CPU", CUDA: "CUDA", CUDA_HOST: "CUDA pinned host memory"}


def _device_name(device_type: int) -> str:
    return f"{_DEVICE_NAMES.get(device_type, 'device')} (DLPack device type {device_type})"


def dlpack_device(array: Any) -> tuple[int, int]:
    """``(device type, device id)`` of a device array, as ``__dlpack_device__`` answers: ``(1, 0)`` for host
    memory (the ``numpy`` and ``sim`` backends), ``(2, id)`` for the memory of CUDA device ``id``.

    >>> import numpy as np
    >>> dlpack_device(np.zeros(3))
    (1, 0)
    """
    if memory.array_backend(array) == "cuda":
        return CUDA, int(backend.cuda().get_current_device().id)
    return CPU, 0


def to_dlpack(
    array: Any,
    *,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> Any:
    """The DLPack capsule of a device array (what ``Tensor.__dlpack__`` returns); the arguments are DLPack's.

    ``stream`` is the consumer's CUDA stream; on ``cuda`` every launch nbcoll made is finished before the capsule
    is handed out (unless ``stream == -1``, the consumer's way of saying it needs no ordering). ``copy=True``
    exports a copy; ``dl_device`` other than the array's own is refused with a ``BufferError``.

    >>> import numpy as np
    >>> type(to_dlpack(np.arange(3.0))).__name__
    'PyCapsule'
    """
    found = memory.array_backend(array)
    if found in ("numpy", "sim"):
        host = array if found == "numpy" else array._ary  # the simulator's arrays wrap an ndarray
        if BFLOAT16 is None or host.dtype != BFLOAT16:
            return host.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        _check_device(dl_device, (CPU, 0))  # NumPy cannot export bfloat16: nbcoll's own capsule does
        host = host.copy() if copy else host
        return export(host.__array_interface__["data"][0], host.shape, host.strides, host.dtype, (CPU, 0), host)
    if found != "cuda":
        raise TypeError(f"array: expected a device array of the {backend.get_backend()!r} backend, got {type(array)}")
    device = dlpack_device(array)
    _check_device(dl_device, device)
    cuda = backend.cuda()
    if copy:
        array = _contiguous_copy(array)
    if stream != -1:
        cuda.synchronize()  # the consumer's stream then reads finished data, whichever stream it is
    pointer = array.device_ctypes_pointer.value or 0
    return export(pointer, array.shape, array.strides, array.dtype, device, owner=array)


def _check_device(dl_device: tuple[int, int] | None, device: tuple[int, int]) -> None:
    if dl_device is not None and tuple(dl_device) != device:
        raise BufferError(f"dl_device: this tensor lives on {device}, got {tuple(dl_device)}; copy it there first")


def from_dlpack(obj: Any, *, copy: bool | None = None) -> Tensor:
    """A Tensor over the memory of ``obj``, any object with ``__dlpack__`` (a PyTorch tensor, a NumPy array, an
    nbcoll Tensor) or, on ``cuda``, with ``__cuda_array_interface__``; PyTorch's ``torch.from_dlpack`` is the
    other direction.

    ``copy=None`` shares the memory when nbcoll can use its layout (C-contiguous, a supported dtype, on this
    backend's kind of memory) and copies a strided view; ``copy=True`` always copies; ``copy=False`` never does
    and raises ``BufferError`` where a copy would be needed. The result never requires grad: gradients and
    the autograd graph of ``obj`` are not carried over.

    >>> import numpy as np, nbcoll
    >>> host = np.zeros((2, 3), np.int64)
    >>> x = nbcoll.from_dlpack(host)
    >>> host[1, 2] = 7                       # the same memory: x sees the write
    >>> x.numpy()[1, 2], x.shape, x.dtype, x.requires_grad
    (np.int64(7), (2, 3), dtype('int64'), False)
    >>> nbcoll.from_dlpack(host.T).shape     # a strided view: copied (copy=False would refuse it)
    (3, 2)
    """
    current = backend.get_backend()
    if not hasattr(obj, "__dlpack__") and not (current == "cuda" and hasattr(obj, "__cuda_array_interface__")):
        raise TypeError(
            f"obj: expected an object with __dlpack__ (a PyTorch tensor, a NumPy or CuPy array), got {type(obj)}"
        )
    if copy not in (None, True, False):
        raise ValueError(f"copy: expected None, True or False, got {copy!r}")
    array = _cuda_array(obj) if current == "cuda" else _host_array(obj, current)
    memory.check_dtype(array.dtype, "obj.dtype", allow_bool=True)
    if not memory.is_contiguous(array):
        if copy is False:
            raise BufferError(
                f"obj: has strides {tuple(array.strides)} for shape {tuple(array.shape)}, and nbcoll holds only "
                "C-contiguous memory; pass copy=None to copy it, or make it contiguous first"
            )
        copy = True
    if copy:
        array = _contiguous_copy(array)
    elif current == "sim":
        array = backend.cuda().device_array(array.shape, array.dtype, buffer=array)  # wrapped, not copied
    return Tensor._from_array(array)


def _host_array(obj: Any, current: str) -> np.ndarray:
    """``obj``'s memory as a NumPy array (no copy), for the ``numpy`` and ``sim`` backends."""
    device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else CPU
    if device_type not in (CPU, CUDA_HOST):
        raise BufferError(
            f"obj: lives on {_device_name(device_type)}, but the {current!r} backend shares host memory only; "
            "move it to the CPU first (tensor.cpu())"
        )
    try:
        return np.from_dlpack(obj)
    except RuntimeError as exc:  # NumPy's words for a dtype it lacks: bfloat16 is read from the capsule here
        try:
            interface, dtype, _, release = describe(obj.__dlpack__())
        except TypeError:
            raise TypeError(f"obj.dtype: NumPy cannot hold it ({exc}); convert it first, e.g. to float32") from exc
    words = np.dtype(f"u{dtype.itemsize}")  # NumPy's array interface names no bfloat16: read words, then view
    holder = _Holder("__array_interface__", {**interface, "typestr": words.str})
    weakref.finalize(holder, release)  # the producer frees its memory once no array reads it
    return np.asarray(holder).view(dtype)


def _cuda_array(obj: Any) -> Any:
    """``obj``'s memory as a Numba device array (no copy), for the ``cuda`` backend."""
    cuda = backend.cuda()
    if hasattr(obj, "__cuda_array_interface__"):
        return cuda.as_cuda_array(obj)  # Numba keeps obj alive and waits on the stream the interface names
    device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else CPU
    if device_type != CUDA:
        raise BufferError(
            f"obj: lives on {_device_name(device_type)}, but the 'cuda' backend shares CUDA device memory only; "
            "move it to the GPU first, or copy it with nbcoll.tensor(numpy_array)"
        )
    # Stream 1 is CUDA's legacy default stream, the one nbcoll's launches and copies run on.
    interface, _, _, release = describe(obj.__dlpack__(stream=1))
    holder = _Holder("__cuda_array_interface__", interface)
    weakref.finalize(holder, release)  # the producer frees its memory once no array reads it
    return cuda.from_cuda_array_interface(interface, owner=holder, sync=False)


class _Holder:
    """The owner of memory read from a DLPack capsule: alive as long as an array over that memory is."""

    def __init__(self, protocol: str, interface: dict) -> None:
        setattr(self, protocol, interface)  # __array_interface__ or __cuda_array_interface__


def _contiguous_copy(array: Any) -> Any:
    """A C-contiguous copy on the current backend: host memory is copied by NumPy, device memory by a kernel."""
    if isinstance(array, np.ndarray):
        host = np.array(array, order="C", copy=True)
        return host if backend.get_backend() == "numpy" else from_host(host)
    from nbcoll.kernels import copy as copy_kernels

    return copy_kernels.strided_copy(array)


def _tensor_dlpack(
    self: Tensor, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
) -> Any:
    """This tensor's memory as a DLPack capsule, not a copy: ``torch.from_dlpack(x)`` shares it. Only the values
    go; a tensor that requires grad is refused, as PyTorch does."""
    if self.requires_grad:
        raise BufferError("__dlpack__: this tensor requires grad and gradients do not travel; export x.detach()")
    return to_dlpack(self.data, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)


def _tensor_dlpack_device(self: Tensor) -> tuple[int, int]:
    """``(device type, device id)`` of the memory: ``(1, 0)`` on the CPU (numpy, sim), ``(2, id)`` on a GPU."""
    return dlpack_device(self.data)


Tensor.__dlpack__ = _tensor_dlpack
Tensor.__dlpack_device__ = _tensor_dlpack_device

__all__ = ["dlpack_device", "from_dlpack", "to_dlpack"]
