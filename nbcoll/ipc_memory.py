"""IPC-exportable buffers: memory one process creates and other processes on the same node use live.

This is what the ``ipc`` transport stands on. On ``cuda`` a buffer is device memory shared by a CUDA IPC handle
(the 64 bytes of the allocation's ``CUipcMemHandle``, sent as plain data: see :mod:`nbcoll.cuda_ipc`), and a
kernel reads the peer's memory directly. On ``sim`` and ``numpy`` it is POSIX shared memory (``/dev/shm``),
wrapped without a copy: a NumPy array, or a simulator device array over the same bytes, so a simulated
kernel's writes are seen by the other processes at once. ``host=True`` asks for a shared host page on every
backend (step counters, flags).

The lifetime of a name in ``/dev/shm``, and how nothing leaks:

1. The owner creates a buffer (:meth:`IpcBuffer.create`) and sends ``buffer.handle`` (small, picklable) to its
   peers.
2. Each peer opens it (:meth:`IpcBuffer.open`). Peers never unlink, nor let Python's resource tracker unlink.
3. All agree that everyone has attached (the caller's barrier), then the owner removes the name at once
   (:meth:`IpcBuffer.unlink`). From then on the memory lives only as long as the processes that map it: even
   ``SIGKILL`` of every process leaks nothing. :func:`share` does steps 1-3 over an MPI communicator.
4. Until step 3, the owner unlinks its names when it closes a buffer, when the buffer is garbage-collected and
   at interpreter exit; if it dies first, Python's resource tracker (a process of its own, which knows only the
   owner's names: peers map without telling it) unlinks them. A whole session killed before step 3, tracker
   included, leaves its names behind; :func:`~nbcoll.shm_names.cleanup_stale` removes those whose creator is
   dead (the creator's pid is part of every name). No signal handler is involved: ``SIGTERM`` ends a process
   at once, even one blocked in a C call.
"""

from __future__ import annotations

import math
import os
import pickle
import weakref
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from nbcoll import backend, memory
from nbcoll.cuda_ipc import CudaIpcHandle, export_array, open_array
from nbcoll.shm_names import (  # noqa: F401  (the names and sweeps, importable from here as before)
    MAX_NAME_LENGTH,
    NAME_PREFIX,
    SHM_DIR,
    attach,
    cleanup_stale,
    creator_pid,
    new_name,
    release,
    start_resource_tracker,
    track_created,
    unlink,
    unlink_names_of,
)

KINDS = ("shm", "cuda")


@dataclass(frozen=True)
class IpcHandleInfo:
    """Everything a peer needs to open an :class:`IpcBuffer`; small and picklable (send it with MPI, a pipe...).

    Example::

        handle = IpcBuffer.create(16, np.int64).handle      # IpcHandleInfo(kind='shm', name='nbcoll_4242_0', ...)
        peer = IpcBuffer.open(handle)                       # in another process
    """

    kind: str
    """``"shm"`` (POSIX shared memory, ``sim``/``numpy`` or ``host=True``) or ``"cuda"`` (CUDA IPC)."""
    name: str
    """The ``/dev/shm`` name for ``"shm"``; for ``"cuda"`` a label only (CUDA IPC handles have no name)."""
    shape: tuple[int, ...]
    dtype: str
    host: bool = False
    """True when the buffer is a NumPy array on every backend (a shared host page)."""
    cuda_handle: CudaIpcHandle | None = None
    """For ``"cuda"``: the allocation's CUDA IPC handle as bytes, size and offset (no Numba object)."""


# -------------------------------------------------------------------------------------------------------------
# The buffer.


def _shape_of(shape: Any) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(int(s) < 0 for s in shape):
        raise ValueError(f"shape: dimensions must be >= 0, got {shape}")
    return tuple(int(s) for s in shape)


def _wrap_shared(shm: SharedMemory, shape: tuple[int, ...], dtype: np.dtype, host: bool) -> Any:
    """An array over the segment's bytes, without a copy: NumPy on host/numpy, a simulator array on sim."""
    # np.frombuffer holds the segment's memory exported for as long as any view of it lives, so the segment
    # cannot be unmapped under a view (np.ndarray(buffer=...) holds no export: unmapping would crash a reader).
    host_view = np.frombuffer(shm.buf, dtype, count=math.prod(shape)).reshape(shape)
    if host or backend.get_backend() == "numpy":
        return host_view
    if backend.get_backend() == "sim":
        return backend.cuda().device_array(shape, dtype, buffer=host_view)
    raise ValueError(
        "handle: this buffer is shared host memory made on the 'sim' or 'numpy' backend; the 'cuda' backend "
        "opens only buffers made on 'cuda' (or with host=True)"
    )


def _shaped(flat: Any, shape: tuple[int, ...]) -> Any:
    """A CUDA allocation always holds one element at least (an IPC handle needs memory); view it as ``shape``."""
    size = math.prod(shape)
    return flat[:size].reshape(shape)


class IpcBuffer:
    """An array in memory that other processes on this node can map and use live.

    Example::

        owner = IpcBuffer.create((4, 256), np.float32, tag="ring")
        send_to_peers(owner.handle)                 # IpcHandleInfo: small and picklable
        peer = IpcBuffer.open(handle)               # in each peer: the same memory
        barrier()                                   # everyone has attached...
        owner.unlink()                              # ...so the name can go now: nothing can leak any more
        kernel[blocks, threads](peer.array)         # the owner sees the writes as they happen
        peer.close(); owner.close()                 # or use each as a context manager

    ``array`` is a device array of the current backend (a NumPy array on ``numpy`` or with ``host=True``).
    """

    def __init__(self, handle: IpcHandleInfo, array: Any, shm: Any, owner: bool, cuda_mapping: Any):
        """Use :meth:`create` or :meth:`open`; ``shm`` is the segment (``SharedMemory`` for its owner, an
        :class:`~nbcoll.shm_names.AttachedSegment` for a peer), ``cuda_mapping`` a peer's opened CUDA IPC mapping."""
        self._handle = handle
        self._array = array
        self._shm = shm
        self._owner = owner
        self._release = weakref.finalize(self, release, shm, os.getpid() if owner else None, cuda_mapping)

    @classmethod
    def create(cls, shape: Any, dtype: Any, tag: str = "", host: bool = False) -> IpcBuffer:
        """A new buffer owned by this process, uninitialised; ``tag`` (letters and digits) ends its name."""
        shape, dt = _shape_of(shape), memory.check_dtype(dtype, allow_bool=True)
        if not host and backend.get_backend() == "cuda":
            return cls._create_cuda(shape, dt, tag)
        nbytes = max(math.prod(shape) * dt.itemsize, 1)  # a segment cannot be empty
        start_resource_tracker()  # one that a peer's death cannot take down
        for _attempt in range(1000):
            name = new_name(tag)
            try:
                shm = SharedMemory(name=name, create=True, size=nbytes)
                break
            except FileExistsError:
                continue  # left behind by a dead process that had this pid: take the next number
        else:
            raise FileExistsError(f"IpcBuffer.create: no free name {NAME_PREFIX}{os.getpid()}_*; run cleanup_stale()")
        track_created(shm)
        handle = IpcHandleInfo("shm", shm.name, shape, dt.name, host)
        return cls(handle, _wrap_shared(shm, shape, dt, host), shm, owner=True, cuda_mapping=None)

    @classmethod
    def _create_cuda(cls, shape: tuple[int, ...], dtype: np.dtype, tag: str) -> IpcBuffer:
        flat = backend.cuda().device_array(max(math.prod(shape), 1), dtype)
        handle = IpcHandleInfo("cuda", new_name(tag), shape, dtype.name, False, export_array(flat))
        return cls(handle, _shaped(flat, shape), None, owner=True, cuda_mapping=None)

    @classmethod
    def open(cls, handle: IpcHandleInfo) -> IpcBuffer:
        """Map a buffer that another process created, from its :attr:`handle`."""
        if not isinstance(handle, IpcHandleInfo):
            raise TypeError(f"handle: expected an IpcHandleInfo (buffer.handle), got {type(handle).__name__}")
        if handle.kind not in KINDS:
            raise ValueError(f"handle.kind: expected one of {', '.join(KINDS)}, got {handle.kind!r}")
        dtype = np.dtype(handle.dtype)
        if handle.kind == "cuda":
            if backend.get_backend() != "cuda":
                raise ValueError(f"handle: a CUDA IPC buffer needs the 'cuda' backend, not {backend.get_backend()!r}")
            if not isinstance(handle.cuda_handle, CudaIpcHandle):
                got = type(handle.cuda_handle).__name__
                raise TypeError(f"handle.cuda_handle: expected a CudaIpcHandle (from IpcBuffer.create), got {got}")
            flat, mapping = open_array(handle.cuda_handle, max(math.prod(handle.shape), 1), dtype)
            return cls(handle, _shaped(flat, handle.shape), None, owner=False, cuda_mapping=mapping)
        try:
            shm = attach(handle.name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"handle: no shared memory named {handle.name!r}; its owner has closed or unlinked it "
                "(peers must open before the owner unlinks)"
            ) from None
        return cls(handle, _wrap_shared(shm, handle.shape, dtype, handle.host), shm, owner=False, cuda_mapping=None)

    @property
    def handle(self) -> IpcHandleInfo:
        """What a peer passes to :meth:`open`."""
        return self._handle

    @property
    def name(self) -> str:
        return self._handle.name

    @property
    def is_owner(self) -> bool:
        return self._owner

    @property
    def closed(self) -> bool:
        return not self._release.alive

    @property
    def array(self) -> Any:
        """The memory as a device array of the current backend (NumPy on ``numpy`` and for ``host=True``)."""
        if self.closed:
            raise ValueError(f"IpcBuffer {self.name!r} is closed")
        return self._array

    def unlink(self) -> None:
        """Owner only: remove the name, so that no one else can open it; the memory stays mapped while open."""
        if not self._owner:
            raise ValueError(f"IpcBuffer {self.name!r}: only its owner unlinks it (this process opened it)")
        if self._shm is not None:
            unlink(self._shm)

    def close(self) -> None:
        """Unmap the memory (the owner unlinks the name first, if it has not yet). Safe to call twice."""
        self._array = None  # drop nbcoll's views first: the memory cannot be unmapped while they exist
        self._release()

    def __enter__(self) -> IpcBuffer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "owner" if self._owner else "peer"
        state = "closed" if self.closed else "open"
        kind, shape, dtype = self._handle.kind, self._handle.shape, self._handle.dtype
        return f"IpcBuffer({self.name!r}, {kind}, shape={shape}, dtype={dtype}, {role}, {state})"


# -------------------------------------------------------------------------------------------------------------
# The unlink-after-attach protocol over a communicator, and cleanup after crashes.


def share(
    comm: Any, shape: Any, dtype: Any, *, root: int = 0, tag: str = "", host: bool = False, kind: Any = None
) -> IpcBuffer:
    """Every rank of ``comm`` gets the same buffer: ``root`` creates it, the others open it, then it is unlinked.

    ``comm`` is an mpi4py communicator (anything with ``rank``, ``bcast``, ``allgather`` and ``barrier``) whose
    ranks share a node. After this returns, no name is left in ``/dev/shm``: a crash of any rank cannot leak
    the memory. This is the unlink-after-attach protocol of the module docstring. ``kind`` is the buffer class
    (``IpcBuffer`` by default; anything with its ``create``, ``open``, ``handle``, ``unlink`` and ``close``).
    """
    kind = IpcBuffer if kind is None else kind
    buffer: IpcBuffer | None = None
    problem = ""
    message: Any = None
    if comm.rank == root:
        try:
            buffer = kind.create(shape, dtype, tag=tag, host=host)
            message = pickle.loads(pickle.dumps(buffer.handle))  # what bcast sends: fail here, not inside bcast
        except Exception as exc:
            problem = f"rank {root} could not create the buffer: {exc!r}"
    handle = comm.bcast(message if message is not None else problem, root=root)
    if comm.rank != root and not isinstance(handle, str):  # a string says what went wrong on the root
        try:
            buffer = kind.open(handle)
        except Exception as exc:
            problem = f"rank {comm.rank} could not open {handle.name!r}: {exc!r}"
    problems = [p for p in comm.allgather(problem) if p]  # also the barrier: every rank has attached now
    if buffer is not None and comm.rank == root:
        buffer.unlink()
    comm.barrier()  # so that on every rank, once this returns, the name is gone
    if problems:
        if buffer is not None:
            buffer.close()
        raise RuntimeError("share: " + "; ".join(problems))
    return buffer
