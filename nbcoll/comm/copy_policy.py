"""How a collective's copies are made on a CPU: with streaming stores, around the caches, where that pays.

A fast path (:mod:`nbcoll.comm.fast_paths`): the engine makes one :class:`CopyPolicy` when some copy may stream,
and hands it to every :class:`~nbcoll.comm.primitives.Prims` it binds; without one (``NBCOLL_FASTPATH=0``, another
backend, another CPU) every copy is the ordinary copy kernel. Two kinds of copy differ:

* into a collective's **output**: an output of ``NBCOLL_STREAM_BYTES`` or more is larger than the caches can keep,
  so its lines would be evicted before anyone reads them (:mod:`nbcoll.kernels.stream_copy`);
* into memory **a peer reads next** (a piece staged in a direct window, a chunk in a peer's FIFO slot, LL lines):
  an ordinary store first takes the line back from the reader's cache, which on some machines costs several times
  the copy itself; a collective of ``NBCOLL_STREAM_SHARED_BYTES`` or more streams those (``benchmarks/lab/NOTES.md``,
  "Copies into memory a peer reads"). Small collectives keep ordinary stores: they save little, and the compiled
  loop costs a process about 0.2 s to load the first time.

Each choice is made once, when the primitives are bound, so that a step's copy costs no more than the copy it
replaced. The third trick of the direct windows, reading a large plain input out of its owner's process
(``NBCOLL_CMA_BYTES``), is the windows' own choice (:meth:`nbcoll.comm.window.DirectWindows.lend`); the policy
carries its threshold to them.

Example::

    policy = CopyPolicy(stream_bytes=8 << 20, stream_shared_bytes=16 << 10)
    copy = policy.copy_out(out)              # stream_copy.copy for an output of 8 MiB or more, else the copy kernel
    copy(out[0:64], chunk)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbcoll.kernels import ll as ll_kernels
from nbcoll.kernels import ll_host, stream_copy
from nbcoll.kernels.copy import copy_chunk
from nbcoll.kernels.dispatch import resolve

Copy = Callable[[Any, Any], Any]
"""``copy(dst, src)``: ``dst[:] = src`` for two chunks of one dtype and size."""


class CopyPolicy:
    """Which copies of one communicator's collectives stream (each threshold in bytes; 0: never).

    >>> import numpy as np
    >>> from nbcoll.comm.copy_policy import CopyPolicy
    >>> policy = CopyPolicy(stream_bytes=1 << 20, stream_shared_bytes=0)
    >>> policy.streams_out(np.zeros(8, np.float32)), policy.streams_out(np.zeros(1 << 18, np.float32))
    (False, True)
    """

    def __init__(self, stream_bytes: int, stream_shared_bytes: int) -> None:
        self.stream_bytes = stream_bytes
        self.stream_shared_bytes = stream_shared_bytes

    def streams_out(self, out: Any) -> bool:
        """Whether copies into ``out`` stream: an output too large for the caches to keep."""
        return bool(self.stream_bytes) and out is not None and out.nbytes >= self.stream_bytes

    def streams_shared(self, nbytes: int) -> bool:
        """Whether a collective whose larger buffer has ``nbytes`` streams its copies into memory a peer reads."""
        return bool(self.stream_shared_bytes) and nbytes >= self.stream_shared_bytes

    def copy_out(self, out: Any) -> Copy:
        """The copy into chunks of ``out`` (this rank's output, or one a broadcast root writes into)."""
        return stream_copy.copy if self.streams_out(out) else resolve(copy_chunk)

    def copy_shared(self, local: Any, out: Any) -> Copy:
        """The copy into a peer's FIFO slot or this rank's window, for a collective on ``local`` and ``out``."""
        largest = max(0 if b is None else b.nbytes for b in (local, out))
        return stream_copy.copy if self.streams_shared(largest) else resolve(copy_chunk)

    def store_lines(self, nbytes: int) -> Callable[[Any, Any, int], Any]:
        """The write of ``nbytes`` of LL lines (:func:`nbcoll.kernels.ll.store_lines`'s arguments)."""
        return ll_host.stream_store if self.streams_shared(nbytes) else resolve(ll_kernels.store_lines)
