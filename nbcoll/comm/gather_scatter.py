"""Gather and scatter: the root collects every rank's block, or hands each rank its own.

NCCL has no gather or scatter call; its users write them as grouped sends and receives, which is what the
``direct`` algorithm does (:mod:`nbcoll.comm.algorithms.direct`)::

    gather         recvbuf (root)[r*count:...] = sendbuf of rank r           direct
    scatter        recvbuf = sendbuf (root)[rank*count:...]                  direct

Each method checks its arguments once, as the other collectives do (:mod:`nbcoll.comm.collectives`), and runs
through the same plan and queue (``_launch``).

Example::

    comm.gather(mine, on_root, root=0)       # on_root is read and written on rank 0 only
    comm.scatter(blocks, mine, root=0)       # blocks is read on rank 0 only
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.comm.check import Signature
from nbcoll.comm.collective_checks import CollectiveChecks, _dtype_name, _nbytes


class GatherScatter(CollectiveChecks):
    """``gather`` and ``scatter`` of :class:`~nbcoll.comm.communicator.Communicator` (a mixin; the communicator's
    :class:`~nbcoll.comm.collectives.Collectives` provides ``_launch``).

    Example::

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> out = nbcoll.zeros(comm.size, np.int32)
        >>> nbcoll.to_host(comm.gather(nbcoll.to_device(np.array([7], np.int32)), out, root=0))
        array([7], dtype=int32)
        >>> comm.destroy()
    """

    def gather(
        self, sendbuf: Any, recvbuf: Any = None, root: int = 0, algo: str | None = None, async_op: bool = False
    ) -> Any:
        """On ``root``: ``recvbuf[r*count:(r+1)*count] = sendbuf of rank r``; ``recvbuf`` is ignored elsewhere.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> mine = nbcoll.to_device(np.full(2, comm.rank + 1, np.int32))
        >>> on_root = nbcoll.zeros(2 * comm.size, np.int32)
        >>> nbcoll.to_host(comm.gather(mine, on_root, root=0))  # on rank 0: every rank's block in rank order
        array([1, 1], dtype=int32)
        >>> comm.destroy()
        """
        with self.engine.call("gather") as seq:
            root = self._root(root)
            send = self._buffer(sendbuf, "sendbuf")
            count = send.size
            recv = None
            if self.rank == root:
                recv = self._root_blocks(recvbuf, "recvbuf", "gather", root, send, "sendbuf")
                memory.require_writable(recv, "recvbuf")
            return self._launch(
                seq,
                "gather",
                algo,
                async_op,
                Signature("gather", count, _dtype_name(send.dtype), "-", root),
                (send, recv, root),
                result=recvbuf,
                nbytes=_nbytes(send),
                single=[(send, recv)],
            )

    def scatter(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, algo: str | None = None, async_op: bool = False
    ) -> Any:
        """``recvbuf = sendbuf of root [rank*count:(rank+1)*count]``; ``sendbuf`` is ignored off the root.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> blocks = nbcoll.to_device(np.arange(2 * comm.size, dtype=np.int32))   # read on the root only
        >>> mine = nbcoll.zeros(2, np.int32)
        >>> nbcoll.to_host(comm.scatter(blocks, mine, root=0))  # this rank's block of the root's array
        array([0, 1], dtype=int32)
        >>> comm.destroy()
        """
        with self.engine.call("scatter") as seq:
            root = self._root(root)
            recv = self._buffer(recvbuf, "recvbuf")
            memory.require_writable(recv, "recvbuf")
            count = recv.size
            send = None
            if self.rank == root:
                send = self._root_blocks(sendbuf, "sendbuf", "scatter", root, recv, "recvbuf")
            return self._launch(
                seq,
                "scatter",
                algo,
                async_op,
                Signature("scatter", count, _dtype_name(recv.dtype), "-", root),
                (send, recv, root),
                result=recvbuf,
                nbytes=_nbytes(recv),
                single=[(send, recv)],
            )
