"""Cross-memory attach (CMA): a rank copies straight out of a peer process's memory, in one copy, by the kernel.

A buffer that is not registered (``comm.alloc``) lies in memory no peer has mapped, so a direct collective stages
it: its owner copies each piece into its window and the peers copy it out again, two copies per hop. Linux lets
one process read another's memory with one system call, ``process_vm_readv``, which copies the bytes from the
owner's pages into the reader's, once. MPICH and Open MPI use it for their large messages inside a node (UCX's
``cma`` transport, Open MPI's ``smsc/cma``); nbcoll uses it for the unregistered input of a copy collective
(all-gather, all-to-all, broadcast) from ``NBCOLL_CMA_BYTES`` up: the owner lends its input by address
(:mod:`nbcoll.comm.window`) and every reader copies its part straight into its output.

It pays only for large messages. The kernel pins the owner's pages for every call, so a call costs more than a
copy by the reader while the bytes sit in a core's cache: on the machine of the Performance page, two ranks each
reading 1 MiB out of the other took 81 us, where a NumPy copy of 1 MiB took 25 us; from 4 MiB up, where a copy
runs at the memory's speed, it took 1.25x a NumPy copy. Staging costs a second copy, but one a piece's readers
share and one that stays in the caches, so the trade depends on the collective (``benchmarks/lab/cross_memory.py``,
four launches): an all-to-all stages one block per reader and gains most (1.14-1.62x at 4 ranks, 4-64 MiB); an
all-gather stages its input once for every reader and gains only from inputs of about 8 MiB (0.70-0.90x with
4 MiB inputs at 4 ranks, 0.78-1.30x with 16 MiB, 0.85-1.93x with 8-32 MiB at 2 ranks); a broadcast root from 3
ranks on gains where staging makes it the bottleneck. Hence the default of ``NBCOLL_CMA_BYTES``, 8 MiB.

The kernel allows it between processes that could trace each other: the same user, and no policy against it.
Yama's ``ptrace_scope`` 1, the default of some distributions, allows it only from a parent to its descendants, so
not between two ranks of one ``mpiexec``; UCX lifts that for its own process with ``prctl(PR_SET_PTRACER)``, but
a library should not widen who may trace the program it runs in, so nbcoll does not. The windows try a read of
every peer once when they are set up (:func:`probe`), and where any rank cannot read any peer, every rank stages
as before. Only host memory can be read so: the ``numpy`` and ``sim`` backends.

Example::

    read(pid, address, into)       # into[:] = the into.nbytes bytes at ``address`` in process ``pid``
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

from nbcoll import memory


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _load_readv() -> Any:
    """libc's ``process_vm_readv``, or ``None`` where there is none (not Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        readv = libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    readv.restype = ctypes.c_ssize_t
    readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                      ctypes.c_ulong]  # fmt: skip
    return readv


_READV = _load_readv()


def available() -> bool:
    """Whether this system has ``process_vm_readv`` at all (whether a peer may be read is :func:`probe`'s)."""
    return _READV is not None


def read(pid: int, address: int, into: Any) -> None:
    """``into[:] =`` the ``into.nbytes`` bytes at ``address`` in process ``pid``; ``into`` is a contiguous host
    array (NumPy, or a simulator device array). Raises ``OSError`` (``ESRCH``: the process is gone; ``EPERM``: it
    may not be read; ``EFAULT``: the bytes are not all mapped there)."""
    nbytes = int(into.size) * into.dtype.itemsize
    start = memory.address_range(into)[0]
    done = 0
    while done < nbytes:  # the kernel may copy less than asked (a page it could not read): go on, or fail
        local, remote = _IoVec(start + done, nbytes - done), _IoVec(address + done, nbytes - done)
        got = _READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got <= 0:
            err = ctypes.get_errno() if got < 0 else 0
            raise OSError(err, f"process_vm_readv of {nbytes - done} bytes from process {pid} at {address + done:#x}: "
                          f"{os.strerror(err) if err else 'nothing read'}")  # fmt: skip
        done += got


def probe(pid: int, address: int, expected: Any) -> bool:
    """Whether ``expected.nbytes`` bytes at ``address`` of process ``pid`` can be read and equal ``expected``."""
    if _READV is None:
        return False
    seen = expected.copy()
    seen[...] = 0
    try:
        read(pid, address, seen)
    except OSError:
        return False
    return bool((seen == expected).all())
