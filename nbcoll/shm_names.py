"""Names in ``/dev/shm`` and their lifetime: each creator unlinks its own, and the dead's are swept up.

A name is ``nbcoll_<pid>_<counter>[_tag]``: the creator's pid is part of it, so :func:`cleanup_stale` can tell
which names a dead process left behind, and :func:`unlink_names_of` can remove those of one peer that died. A
process that created a segment (:func:`track_created`) unlinks its name when the buffer is closed or collected
(:func:`release`), at interpreter exit, and on ``SIGTERM``. A process that only opens a segment maps it with
:func:`attach`, which keeps Python's resource tracker from unlinking the name under its owner.
:mod:`nbcoll.ipc_memory` builds its buffers on these.

Example::

    >>> import os
    >>> from nbcoll.shm_names import creator_pid, new_name
    >>> name = new_name("ring")
    >>> creator_pid(name) == os.getpid(), name.endswith("_ring")
    (True, True)
"""

from __future__ import annotations

import atexit
import gc
import itertools
import os
import re
import signal
import sys
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
_linked_lock = threading.RLock()  # re-entrant: the SIGTERM handler may run while this thread holds it
_linked: dict[str, SharedMemory] = {}  # names this process created and has not unlinked yet
_previous_sigterm_handler: Any = None
_sigterm_handler_installed = False


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


def _on_sigterm(signum: int, frame: Any) -> None:
    """Unlink this process's names, then do what SIGTERM would have done without this handler."""
    _unlink_all_created_here()
    if callable(_previous_sigterm_handler):
        _previous_sigterm_handler(signum, frame)
        return
    # Die of SIGTERM itself, so that the parent sees the real cause of death.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_sigterm_handler() -> None:
    """Once per process, from the main thread only (Python allows no other), unless SIGTERM is ignored."""
    global _previous_sigterm_handler, _sigterm_handler_installed
    if _sigterm_handler_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_IGN, None):  # None: a handler installed from C; leave it alone
        return
    _previous_sigterm_handler = previous
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_handler_installed = True


atexit.register(_unlink_all_created_here)


_attach_lock = threading.Lock()


def attach(name: str) -> SharedMemory:
    """Map an existing segment without registering it with this process's resource tracker.

    A registered name is unlinked by the tracker when this process exits, from under its owner and the other
    peers. Python 3.13 says so with ``track=False``. Before, every attach registers; unregistering afterwards
    is not enough, because the tracker may be shared (with the owner itself, or with a multiprocessing parent),
    and would then forget the owner's own registration. So registration is switched off around the attach.
    """
    if sys.version_info >= (3, 13):
        return SharedMemory(name=name, track=False)
    with _attach_lock:
        register = resource_tracker.register
        resource_tracker.register = _register_nothing
        try:
            return SharedMemory(name=name)
        finally:
            resource_tracker.register = register


def _register_nothing(name: str, rtype: str) -> None:
    pass


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


def release(shm: SharedMemory | None, owner_pid: int | None, cuda_mapping: Any) -> None:
    """What closing a buffer does; also run when the buffer is garbage-collected and at interpreter exit."""
    if shm is not None:
        if owner_pid == os.getpid():  # never in a forked child, which shares the owner's objects
            unlink(shm)
        _close_mapping(shm)
    if cuda_mapping is not None:
        cuda_mapping.close()


def track_created(shm: SharedMemory) -> None:
    """Remember a segment this process just created: its name is unlinked on close, at exit and on SIGTERM."""
    with _linked_lock:
        _linked[shm.name] = shm
    _install_sigterm_handler()


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
