"""Names in ``/dev/shm`` and their lifetime: a name lives only until every peer has mapped its segment.

A name is ``nbcoll_<pid>_<counter>[_tag]``: the creator's pid is part of it, so :func:`cleanup_stale` can tell
which names a dead process left behind, and :func:`unlink_names_of` can remove those of one peer that died.
Every segment nbcoll shares is unlinked by its creator as soon as all its peers have mapped it (the mapping, not
the name, keeps the memory alive), so from then on no death, ``SIGKILL`` included, can leave anything behind.
Until then, a process that created a segment (:func:`track_created`) unlinks its name when the buffer is closed
or collected (:func:`release`) and at interpreter exit; Python's resource tracker, a process of its own,
unlinks what a creator that died left registered. nbcoll installs no signal handler: ``SIGTERM`` ends a rank
at once, even one blocked in a C call (an MPI wait, a long NumPy call), as it would without nbcoll.

A process that only opens a segment maps it with :func:`attach`, which never tells the resource tracker about
it: a registered name would be unlinked from under its owner when this process exits.
:mod:`nbcoll.ipc_memory` builds its buffers on these.

Example::

    >>> import os
    >>> from nbcoll.shm_names import creator_pid, new_name
    >>> name = new_name("ring")
    >>> creator_pid(name) == os.getpid(), name.endswith("_ring")
    (True, True)
"""

from __future__ import annotations

import _posixshmem  # what SharedMemory opens segments with; in the standard library since Python 3.8
import atexit
import gc
import itertools
import mmap
import os
import re
import signal
import threading
import warnings
from collections.abc import Callable
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

NAME_PREFIX = "nbcoll_"
MAX_NAME_LENGTH = 30
"""macOS allows 31 characters including the leading slash; Linux allows more. Names stay within both."""

SHM_DIR = "/dev/shm"

_counter = itertools.count()
_linked_lock = threading.Lock()
_linked: dict[str, SharedMemory] = {}  # names this process created and has not unlinked yet


def new_name(tag: str) -> str:
    name = f"{NAME_PREFIX}{os.getpid()}_{next(_counter)}"
    tag = re.sub(r"[^A-Za-z0-9]", "", tag)
    return f"{name}_{tag}"[:MAX_NAME_LENGTH] if tag else name


def creator_pid(name: str, prefix: str = NAME_PREFIX) -> int | None:
    """The pid written into a buffer name by its creator (``nbcoll_<pid>_<counter>[_tag]``), or ``None``."""
    if not name.startswith(prefix):
        return None
    head = name[len(prefix) :].split("_", 1)[0]
    return int(head) if head.isdigit() else None


def unlink(shm: SharedMemory) -> None:
    """Remove the name of a segment this process created; the memory stays mapped where it is mapped."""
    with _linked_lock:
        if _linked.pop(shm.name, None) is None:
            return
    try:
        shm.unlink()  # also tells the resource tracker that the name is gone
    except FileNotFoundError:
        # Removed already (cleanup_stale in another process, or by hand); the tracker must forget it too.
        resource_tracker.unregister(shm._name, "shared_memory")


def _unlink_all_created_here() -> None:
    with _linked_lock:
        segments = [shm for shm in _linked.values() if creator_pid(shm.name) == os.getpid()]
    for shm in segments:
        unlink(shm)


atexit.register(_unlink_all_created_here)


class AttachedSegment:
    """A peer's mapping of a segment that another process created: ``name``, ``buf`` and ``close()`` as
    :class:`~multiprocessing.shared_memory.SharedMemory` has them, and nothing else.

    ``SharedMemory(name=...)`` registers every segment it opens with Python's resource tracker (before Python
    3.13, which added ``track=False``), and the tracker unlinks registered names when the process exits, from
    under the owner and the other peers. Unregistering afterwards is no cure: the tracker may be shared (with the
    owner itself, or with a multiprocessing parent) and would then forget the owner's own registration. So a
    peer maps the segment itself, as ``SharedMemory`` does, and the tracker never hears of it.
    """

    def __init__(self, name: str) -> None:
        # shm_open, as SharedMemory calls it (also where there is no /dev/shm directory to open a path in).
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            self._mmap: mmap.mmap | None = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)  # the mapping keeps the memory; the descriptor is not needed any more
        self._fd = -1
        self._buf: memoryview | None = memoryview(self._mmap)
        self.name = name

    @property
    def buf(self) -> memoryview:
        return self._buf

    @property
    def size(self) -> int:
        return len(self._mmap) if self._mmap is not None else 0

    def close(self) -> None:
        """Unmap; raises ``BufferError`` while arrays still view the memory, as ``SharedMemory.close`` does."""
        if self._buf is not None:
            self._buf.release()
            self._buf = None
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None


def attach(name: str) -> AttachedSegment:
    """Map an existing segment, without telling this process's resource tracker (see :class:`AttachedSegment`)."""
    return AttachedSegment(name)


def start_resource_tracker() -> None:
    """Start Python's resource tracker, before this process creates its first segment, with SIGUSR1 blocked in it.

    When one rank of an MPICH job dies, ``mpiexec`` sends SIGUSR1 to every other rank's process group, for MPI's
    own failure handling. The tracker, a child in that group with no handler, would die of it, and the rank's
    next create or unlink of a segment, which tells the tracker, could fail with ``BrokenPipeError``. A child
    starts with its parent thread's signal mask, so a tracker started with SIGUSR1 blocked never receives it.
    """
    if not hasattr(signal, "pthread_sigmask"):
        resource_tracker.ensure_running()
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _close_mapping(shm: SharedMemory) -> None:
    """Unmap a segment, unless arrays over it are still in use; then leave the mapping to them.

    ``SharedMemory.close()`` refuses ("cannot close exported pointers exist") while any array still views the
    memory. The arrays nbcoll made are dropped before this is called; views the caller still holds keep the
    mapping alive, and it is unmapped when the last of them is freed.
    """
    try:
        shm.close()
        return
    except BufferError:
        gc.collect()  # views caught in reference cycles (a traceback, a kernel's argument list)
    try:
        shm.close()
        return
    except BufferError:
        pass
    warnings.warn(
        f"IpcBuffer {shm.name!r} closed while arrays over its memory are still referenced; "
        "the memory stays mapped until they are freed",
        ResourceWarning,
        stacklevel=5,  # the caller of IpcBuffer.close()
    )
    # SharedMemory keeps the mapping in these attributes (unchanged since Python 3.8): hand the mapping to the
    # remaining views by dropping SharedMemory's references, and close only the file descriptor.
    shm._buf = None
    shm._mmap = None
    if getattr(shm, "_fd", -1) >= 0:
        os.close(shm._fd)
        shm._fd = -1


def release(shm: Any, owner_pid: int | None, cuda_mapping: Any) -> None:
    """What closing a buffer does; also run when the buffer is garbage-collected and at interpreter exit."""
    if shm is not None:
        if owner_pid == os.getpid():  # never in a forked child, which shares the owner's objects
            unlink(shm)
        _close_mapping(shm)
    if cuda_mapping is not None:
        cuda_mapping.close()


def track_created(shm: SharedMemory) -> None:
    """Remember a segment this process just created: its name is unlinked on close and at exit, if not before."""
    with _linked_lock:
        _linked[shm.name] = shm


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def unlink_names_of(pid: int, prefix: str = NAME_PREFIX) -> list[str]:
    """Remove every ``/dev/shm`` name that process ``pid`` created; return them. Only once ``pid`` has exited.

    A peer that dies between creating a buffer and unlinking it (``os._exit``, ``SIGKILL``) cannot remove the name
    itself; the communicator that notices the death does it for it.
    """
    return _unlink_names(prefix, lambda creator: creator == pid)


def cleanup_stale(prefix: str = NAME_PREFIX) -> list[str]:
    """Remove ``/dev/shm`` segments named ``<prefix><pid>_...`` whose creator process is dead; return their names.

    Pids are those of this machine's (or container's) process namespace. Where there is no ``/dev/shm`` to list
    (macOS), nothing is done.
    """
    return _unlink_names(prefix, lambda creator: creator is not None and not _process_alive(creator))


def _unlink_names(prefix: str, remove: Callable[[int | None], bool]) -> list[str]:
    """Unlink each ``/dev/shm`` name for whose creator pid ``remove`` says yes (``None``: not one of ours)."""
    if not os.path.isdir(SHM_DIR):
        return []
    removed = []
    for name in sorted(os.listdir(SHM_DIR)):
        if not remove(creator_pid(name, prefix)):
            continue
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except (FileNotFoundError, PermissionError):
            continue
        removed.append(name)
    return removed
