"""Registered buffers: memory every peer on this machine maps, so a direct collective reads its input in place.

``comm.alloc`` is collective; the buffer it returns is an ordinary device array that the peers can also open,
through the communicator's direct windows (:mod:`nbcoll.comm.window`, where the mapping is built and released).
``comm.free`` lets it go on this rank.

Example::

    x = comm.alloc(1 << 20, np.float32)      # every rank, in the same order
    x[:] = ...
    comm.all_gather(x, out, algo="direct")   # the peers read x where it is: one copy per hop instead of two
    comm.free(x)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory


class RegisteredBuffers:
    """``alloc`` and ``free`` of :class:`~nbcoll.comm.communicator.Communicator` (a mixin).

    Example::

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = comm.alloc(2, np.int32)
        >>> x.size
        2
        >>> comm.free(x)
        >>> comm.destroy()
    """

    def alloc(self, count: int, dtype: Any = np.float32) -> Any:
        """Collective: ``count`` x ``dtype`` of memory every peer on this machine maps (NCCL's registered buffers).

        A direct collective (``algo="direct"``) whose input lies in such a buffer lets the peers read it in
        place, so all-gather, broadcast, all-to-all and one-shot all-reduce copy each byte once per hop instead
        of twice; any other buffer is copied through a window or a FIFO first. Every rank calls it, in the same
        order. With a peer on another node it is plain device memory.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = comm.alloc(4, np.float32)
        >>> x[:] = 1.0
        >>> nbcoll.to_host(comm.all_gather(x, nbcoll.zeros(4 * comm.size), algo="direct"))
        array([1., 1., 1., 1.], dtype=float32)
        >>> comm.free(x)
        >>> comm.destroy()
        """
        if int(count) < 0:
            raise ValueError(f"count: expected a number of elements >= 0, got {count}")
        self._check_usable()
        return self.engine.alloc(int(count), memory.check_dtype(dtype))

    def free(self, array: Any) -> None:
        """Let go of a buffer from :meth:`alloc` on this rank, once no collective uses it any more.

        Local: every rank frees its own buffer, in any order.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = comm.alloc(8, np.int32)
        >>> comm.free(x)
        >>> comm.destroy()
        """
        self.engine.free(array)
