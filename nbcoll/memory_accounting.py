"""How many bytes nbcoll's arrays hold on this process, and the peak: what ``nbcoll.memory.stats()`` reports.

Each allocation is counted once, on the object that owns its memory (views share it), and given back by a
finalizer when that object is freed::

    nbcoll.memory.reset_peak_stats()
    loss.backward()
    nbcoll.memory.stats().peak_bytes      # the most bytes alive at once during backward
"""

from __future__ import annotations

import collections
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcoll import backend


@dataclass(frozen=True)
class MemoryStats:
    """Device memory that nbcoll's allocation functions hold on this process.

    Example::

        nbcoll.memory.reset_peak_stats()
        loss.backward()
        nbcoll.memory.stats().peak_bytes      # the most bytes alive at once during backward
    """

    allocated_bytes: int
    """Bytes of the arrays alive now."""
    peak_bytes: int
    """The largest ``allocated_bytes`` since the last :func:`reset_peak_stats` (or since the start)."""
    live_allocations: int
    """How many allocations are alive now (an array and its views are one)."""


class _Counter:
    """Bytes alive and their peak, by memory owner; a finalizer on each owner gives its bytes back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the progress thread of a communicator allocates too
        self.allocated = 0
        self.peak = 0
        self.owners: set[int] = set()  # id() of each counted owner, dropped once its finalizer has run
        # Owners freed but not yet taken off the count. A finalizer runs wherever the garbage collector does, and
        # that can be inside add() on the very thread that holds the lock: it must not wait for the lock there.
        self.freed: collections.deque[tuple[int, int, int]] = collections.deque()
        # thread id -> [allocated, peak] of the owners that thread allocated: a loopback rank's own share
        self.threads: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])

    def add(self, owner: Any, nbytes: int) -> None:
        thread = threading.get_ident()
        with self.lock:
            self.take_off_freed()  # first: a new owner may have the id() of one freed a moment ago
            if id(owner) in self.owners:
                return
            self.owners.add(id(owner))
            self.allocated += nbytes
            self.peak = max(self.peak, self.allocated)
            mine = self.threads[thread]
            mine[0] += nbytes
            mine[1] = max(mine[1], mine[0])
        weakref.finalize(owner, self.freed.append, (id(owner), nbytes, thread))

    def take_off_freed(self) -> None:
        """Take the bytes of freed owners off the count; called with the lock held."""
        while self.freed:
            key, nbytes, thread = self.freed.popleft()
            self.owners.discard(key)
            self.allocated -= nbytes
            self.threads[thread][0] -= nbytes


_counter = _Counter()


def _memory_owner(array: Any) -> Any:
    """The object whose lifetime is the allocation's: views of an array keep it alive."""
    if isinstance(array, np.ndarray):
        host = array
    elif backend.device_backend() == "sim":
        host = array._ary  # the simulator keeps a NumPy array inside
    else:
        # numba-cuda hands each array, and each view of it, a pointer object of its own; ``owner`` is the one
        # allocation they all share (or the object that lent the memory), which lives until the last goes.
        owner = array.gpu_data.owner
        try:
            weakref.ref(owner)
        except TypeError:  # a lender that cannot be watched: the pointer object is the next best
            return array.gpu_data
        return owner
    while isinstance(host.base, np.ndarray):
        host = host.base
    return host


def track(array: Any) -> Any:
    """Count the memory under ``array`` in :func:`stats` until it is freed (once, however many views); return it.

    The allocation functions here call it; so does every Tensor for its data, which counts the results of the
    NumPy references on the ``numpy`` backend too.
    """
    owner = _memory_owner(array)
    nbytes = owner.nbytes if isinstance(owner, np.ndarray) else int(owner.size)
    _counter.add(owner, int(nbytes))
    return array


def stats(this_thread: bool = False) -> MemoryStats:
    """Bytes allocated now and at the peak by :func:`empty`, :func:`zeros` and :func:`to_device` on this process.

    ``this_thread``: only what the calling thread allocated (its peak since its own reset), so that each rank of
    a loopback world (ranks as threads) measures its own memory; ``live_allocations`` stays the process's.

    That is every Tensor, gradient, optimizer state and kernel output, on every backend. A Python object that
    is part of a reference cycle is freed (and uncounted) only when the garbage collector runs: call
    ``gc.collect()`` first for an exact figure.
    """
    with _counter.lock:
        _counter.take_off_freed()
        if this_thread:
            allocated, peak = _counter.threads[threading.get_ident()]
            return MemoryStats(allocated, peak, len(_counter.owners))
        return MemoryStats(_counter.allocated, _counter.peak, len(_counter.owners))


def reset_peak_stats() -> None:
    """Start measuring the peak again from the bytes allocated now (the calling thread's too)."""
    with _counter.lock:
        _counter.take_off_freed()
        _counter.peak = _counter.allocated
        mine = _counter.threads[threading.get_ident()]
        mine[1] = mine[0]


__all__ = ["MemoryStats", "reset_peak_stats", "stats", "track"]
