"""Memory that the ranks of one process share by handle: the loopback world's stand-in for IPC buffers.

:class:`LocalBuffer` has the interface of :class:`~nbcoll.ipc_memory.IpcBuffer` (``create``, ``open`` by handle,
``unlink``, ``close``, ``array``) and the same life cycle, so bootstrap and the direct windows use either one
unchanged; here the handle names an entry in this process's table instead of a ``/dev/shm`` segment.

Example::

    owner = LocalBuffer.create(1024, np.uint8, tag="fifo")    # rank 1's thread
    peer = LocalBuffer.open(owner.handle)                     # rank 0's thread: the same memory
    owner.unlink()                                            # no one else can open it now
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcoll import backend


@dataclass(frozen=True)
class LocalHandle:
    """What a peer passes to :meth:`LocalBuffer.open`: a name in this process's table of buffers."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    host: bool = False


_buffers: dict[str, Any] = {}
_buffers_lock = threading.Lock()
_names = itertools.count()


class LocalBuffer:
    """An array the ranks of one process share by handle, with :class:`~nbcoll.ipc_memory.IpcBuffer`'s interface.

    Example::

        owner = LocalBuffer.create(1024, np.uint8, tag="fifo")    # rank 1's thread
        peer = LocalBuffer.open(owner.handle)                     # rank 0's thread: the same memory
        owner.unlink()                                            # no one else can open it now
    """

    def __init__(self, handle: LocalHandle, array: Any, owner: bool) -> None:
        self._handle, self._array, self._owner = handle, array, owner

    @classmethod
    def create(cls, shape: Any, dtype: Any, tag: str = "", host: bool = False) -> LocalBuffer:
        """A new zeroed buffer: a NumPy array when ``host`` (or on ``numpy``), else a device array."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dt = np.dtype(dtype)
        array = np.zeros(shape, dt)
        if not host and backend.get_backend() != "numpy":  # not counted by memory.stats(), as IpcBuffer is not
            array = backend.cuda().to_device(array)
        handle = LocalHandle(f"loopback_{next(_names)}_{tag}", shape, dt.name, host)
        with _buffers_lock:
            _buffers[handle.name] = array
        return cls(handle, array, owner=True)

    @classmethod
    def open(cls, handle: LocalHandle) -> LocalBuffer:
        """The buffer another rank of this process created, from its :attr:`handle`."""
        if not isinstance(handle, LocalHandle):
            raise TypeError(f"handle: expected a LocalHandle (buffer.handle), got {type(handle).__name__}")
        with _buffers_lock:
            array = _buffers.get(handle.name)
        if array is None:
            raise FileNotFoundError(f"handle: no buffer named {handle.name!r}; its owner has closed or unlinked it")
        return cls(handle, array, owner=False)

    @property
    def handle(self) -> LocalHandle:
        return self._handle

    @property
    def array(self) -> Any:
        if self._array is None:
            raise ValueError(f"LocalBuffer {self._handle.name!r} is closed")
        return self._array

    def unlink(self) -> None:
        """Owner only: forget the name; those that opened the buffer keep it."""
        with _buffers_lock:
            _buffers.pop(self._handle.name, None)

    def close(self) -> None:
        if self._owner:
            self.unlink()
        self._array = None
