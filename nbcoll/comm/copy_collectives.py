"""The collectives that only copy (a mixin of :class:`~nbcoll.comm.collectives.Collectives`): broadcast,
all-gather and all-to-all, and the barrier; the reductions are in :mod:`nbcoll.comm.collectives`::

    broadcast      recvbuf = sendbuf of root                                 ring, tree, direct
    all_gather     recvbuf[r*count:(r+1)*count] = sendbuf of rank r          ring, direct
    all_to_all     recvbuf[p*count:...] = sendbuf[rank*count:...] of rank p  pairwise, direct
    barrier        returns when every rank has called it                     pairwise

Each checks every argument once and hands the checked buffers to the engine's plan, as the reductions do.

Example::

    comm.broadcast(weights, root=0)                      # in place
    comm.all_gather(shard, full)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.comm.check import Signature
from nbcoll.comm.collective_checks import _address_range, _dtype_name, _nbytes
from nbcoll.comm.collective_launch import CollectiveLaunch


class CopyCollectives(CollectiveLaunch):
    """Broadcast, all-gather, all-to-all and the barrier of the communicator (a mixin).

    >>> import numpy as np, nbcoll
    >>> comm = nbcoll.init()
    >>> everyone = nbcoll.zeros(comm.size, np.int32)
    >>> nbcoll.to_host(comm.all_gather(nbcoll.to_device(np.array([comm.rank], np.int32)), everyone))
    array([0], dtype=int32)
    >>> comm.destroy()
    """

    def broadcast(
        self,
        sendbuf: Any,
        recvbuf: Any = None,
        root: int = 0,
        algo: str | None = None,
        async_op: bool = False,
        proto: str | None = None,
    ) -> Any:
        """``recvbuf = sendbuf of root`` on every rank (``sendbuf`` is only read on the root); ``proto`` as for
        :meth:`all_reduce`.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = nbcoll.to_device(np.full(3, 10.0 * comm.rank, np.float32))
        >>> nbcoll.to_host(comm.broadcast(x, root=0))          # rank 0's values everywhere
        array([0., 0., 0.], dtype=float32)
        >>> comm.destroy()
        """
        ran, result = self._on_device("broadcast", proto, sendbuf, recvbuf, None, root, algo, async_op)
        if ran:
            return result
        with self.engine.call("broadcast") as seq:
            root = self._root(root)
            send = self._buffer(sendbuf, "sendbuf")
            recv = send if recvbuf is None else self._buffer(recvbuf, "recvbuf")
            self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
            self._same_or_apart(send, recv)
            memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
            return self._launch(
                seq,
                "broadcast",
                algo,
                async_op,
                Signature("broadcast", recv.size, _dtype_name(recv.dtype), "-", root),
                (send, recv, root),
                result=recvbuf if recvbuf is not None else sendbuf,
                nbytes=_nbytes(recv),
                single=[(send, recv)],
            )

    def all_gather(
        self, sendbuf: Any, recvbuf: Any, algo: str | None = None, async_op: bool = False, proto: str | None = None
    ) -> Any:
        """``recvbuf[r*count:(r+1)*count] = sendbuf of rank r``, with ``count = sendbuf.size``; ``proto`` as for
        :meth:`all_reduce`.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> mine = nbcoll.to_device(np.full(2, comm.rank, np.int32))
        >>> everyone = nbcoll.zeros(2 * comm.size, np.int32)
        >>> nbcoll.to_host(comm.all_gather(mine, everyone))   # under mpiexec -n 3: [0 0 1 1 2 2]
        array([0, 0], dtype=int32)
        >>> comm.destroy()
        """
        ran, result = self._on_device("all_gather", proto, sendbuf, recvbuf, None, -1, algo, async_op)
        if ran:
            return result
        with self.engine.call("all_gather") as seq:
            send, recv = self._buffer(sendbuf, "sendbuf"), self._buffer(recvbuf, "recvbuf")
            count = send.size
            self._same_size(recv, "recvbuf", send, "sendbuf", count * self.size, f"{self.size} x sendbuf.size")
            own = recv[self.rank * count : (self.rank + 1) * count]
            self._no_overlap(send, recv, allowed=_address_range(send) == _address_range(own))
            memory.require_writable(recv, "recvbuf")
            return self._launch(
                seq,
                "all_gather",
                algo,
                async_op,
                Signature("all_gather", count, _dtype_name(send.dtype), "-", -1),
                (send, recv),
                result=recvbuf,
                nbytes=_nbytes(send),
                single=[(send, recv)],
            )

    def all_to_all(self, sendbuf: Any, recvbuf: Any, algo: str | None = None, async_op: bool = False) -> Any:
        """``recvbuf[p*count:(p+1)*count] = sendbuf[rank*count:(rank+1)*count] of rank p``.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> blocks = [10 * comm.rank + p for p in range(comm.size)]     # block p goes to rank p
        >>> out = nbcoll.to_device(np.array(blocks, np.int32))
        >>> into = nbcoll.zeros(comm.size, np.int32)
        >>> nbcoll.to_host(comm.all_to_all(out, into))           # block p came from rank p
        array([0], dtype=int32)
        >>> comm.destroy()
        """
        with self.engine.call("all_to_all") as seq:
            send, recv = self._buffer(sendbuf, "sendbuf"), self._buffer(recvbuf, "recvbuf")
            self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
            if send.size % self.size:
                raise ValueError(f"sendbuf: size {send.size} is not a multiple of the {self.size} ranks")
            self._no_overlap(send, recv, allowed=False)
            memory.require_writable(recv, "recvbuf")
            return self._launch(
                seq,
                "all_to_all",
                algo,
                async_op,
                Signature("all_to_all", send.size // self.size, _dtype_name(send.dtype), "-", -1),
                (send, recv),
                result=recvbuf,
                nbytes=_nbytes(send) // self.size,
                single=[(send, recv)],
            )

    def barrier(self, async_op: bool = False) -> Any:
        """Return only when every rank has called it.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.barrier()                         # every rank has reached this line
        >>> comm.barrier(async_op=True).wait()
        >>> comm.destroy()
        """
        with self.engine.call("barrier") as seq:
            token = memory.zeros(1, np.uint8)
            return self._launch(
                seq,
                "barrier",
                None,
                async_op,
                Signature("barrier", 0, "-", "-", -1),
                (token,),
                result=None,
                nbytes=0,
                single=[],
            )
