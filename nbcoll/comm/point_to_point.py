"""Point-to-point as methods of the communicator: ``send``, ``recv``, ``group`` and ``drive``.

Each method checks its arguments once, records the message in the flight recorder, and hands one operation of
:mod:`nbcoll.comm.p2p` to the communicator's group (:mod:`nbcoll.comm.group`): run at once, or queued until the
outermost ``with comm.group():`` ends. ``drive`` runs operations built elsewhere (a collective algorithm's) through
the same queue.

Example::

    with comm.group():                               # a ring of exchanges cannot deadlock inside a group
        comm.send(x, (comm.rank + 1) % comm.size)
        comm.recv(y, (comm.rank - 1) % comm.size)
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.comm.group import Group
from nbcoll.comm.p2p import RecvOp, SendOp, describe_array


class PointToPoint:
    """The sends and receives of :class:`~nbcoll.comm.communicator.Communicator` (a mixin).

    Example::

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = nbcoll.to_device(np.arange(4, dtype=np.float32))
        >>> if comm.size > 1:                      # under mpiexec: rank 0 sends to rank 1
        ...     if comm.rank == 0:
        ...         comm.send(x, peer=1)
        ...     elif comm.rank == 1:
        ...         comm.recv(x, peer=0)
        >>> comm.destroy()
    """

    def send(self, buf: Any, peer: int) -> None:
        """Send the whole of the contiguous device array ``buf`` to ``peer``.

        ``for k in chunks: wait for a free slot at peer; copy buf's chunk k into it; publish``. Returns when
        every chunk is in the peer's FIFO (or on the wire); inside :meth:`group`, when the group ends.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = nbcoll.to_device(np.arange(4, dtype=np.float32))
        >>> if comm.size > 1 and comm.rank == 0:   # under mpiexec -n 2: rank 0 sends, rank 1 receives
        ...     comm.send(x, peer=1)
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.settle()
        data = self._flat_buffer(buf, "buf")
        peer = self._check_peer(peer)
        record = self.recorder.record("send", peer, data.size * data.dtype.itemsize, describe_array(data))
        self.log.info("P2P", f"send #{record.seq} to peer {peer}: {record.nbytes} bytes, {record.what}")
        self._group.submit(SendOp(self.send_connection(peer), data, self.peer_counters(peer), record))

    def recv(self, buf: Any, peer: int) -> None:
        """Receive a message from ``peer`` into the contiguous device array ``buf``, which it must fill exactly.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> y = nbcoll.zeros(4)
        >>> if comm.size > 1 and comm.rank == 1:   # under mpiexec -n 2: what rank 0 sent
        ...     comm.recv(y, peer=0)
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.settle()
        data = self._flat_buffer(buf, "buf")
        memory.require_writable(data, "buf")
        peer = self._check_peer(peer)
        record = self.recorder.record("recv", peer, data.size * data.dtype.itemsize, describe_array(data))
        self.log.info("P2P", f"recv #{record.seq} from peer {peer}: {record.nbytes} bytes, {record.what}")
        self._group.submit(RecvOp(self.recv_connection(peer), data, self.peer_counters(peer), record))

    def group(self) -> Group:
        """``with comm.group(): ...`` queues the sends and receives inside and runs them together at the end.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x, y = nbcoll.to_device(np.ones(4, np.float32)), nbcoll.zeros(4)
        >>> with comm.group():                     # on one rank: an empty group
        ...     for peer in range(comm.size):
        ...         if peer != comm.rank:          # an exchange with every other rank, in any order
        ...             comm.send(x, peer)
        ...             comm.recv(y, peer)
        >>> comm.destroy()
        """
        self._check_usable()
        return self._group

    def drive(self, ops: list[Any]) -> None:
        """Progress operations built on this communicator's connections until done (see :mod:`.watchdog`).

        They run in issue order with this communicator's other operations, after any still in flight.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.drive([])                         # ops from nbcoll.comm.p2p, as a collective algorithm builds them
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.run_batch(list(ops), [])
