"""``all_gather``, ``reduce_scatter``, ``broadcast`` and ``reduce`` with ``proto="device"``: each one kernel per rank
(:mod:`nbcoll.comm.algorithms.ring_device_rank_collectives`), on the connections of the device all-reduce.

:class:`DeviceCollectives` is the device all-reduce (:class:`~nbcoll.comm.device_connections.DeviceAllReduce`) with
these four beside it: the same FIFOs and counters (a call carries on from the counts the last one left, whichever
collective it was), the same watch, errors and fallback. Each method checks its arguments as the communicator's
host path does, then launches this rank's kernel once.

Example (every rank of a communicator on one machine)::

    device = DeviceCollectives(comm)
    device.all_gather(shard, full)             # one kernel launch; the host watches and never steers a chunk
    device.reduce(x, None, "max", root=2)
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.comm.algorithms.ring_device_rank_collectives import KERNELS
from nbcoll.comm.collective_checks import _address_range
from nbcoll.comm.device_collective import check_proto, unsupported
from nbcoll.comm.device_connections import DeviceAllReduce
from nbcoll.kernels import combine as combine_kernels


class DeviceCollectives(DeviceAllReduce):
    """The device path of one communicator's ring collectives (``comm.engine.device``, made at its first use).

    >>> import numpy as np, nbcoll
    >>> comm = nbcoll.init()
    >>> device = DeviceCollectives(comm)
    >>> device.broadcast(np.arange(3, dtype=np.int32), None, root=0)      # one rank: the kernel copies
    array([0, 1, 2], dtype=int32)
    >>> device.close(); comm.destroy()
    """

    def all_gather(self, sendbuf: Any, recvbuf: Any) -> Any:
        """``recvbuf[r*count:(r+1)*count] = sendbuf of rank r`` by one kernel launch per rank.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> DeviceCollectives(comm).all_gather(np.ones(2, np.float32), np.zeros(2, np.float32))
        array([1., 1.], dtype=float32)
        >>> comm.destroy()
        """
        comm = self.comm
        with comm.engine.call("all_gather") as seq:
            self._check_usable()
            send, recv = comm._buffer(sendbuf, "sendbuf"), comm._buffer(recvbuf, "recvbuf")
            count = send.size
            comm._same_size(recv, "recvbuf", send, "sendbuf", count * self.nranks, f"{self.nranks} x sendbuf.size")
            own = recv[self.rank * count : (self.rank + 1) * count]
            comm._no_overlap(send, recv, allowed=_address_range(send) == _address_range(own))
            memory.require_writable(recv, "recvbuf")
            comm.engine.mark_run(seq)
        self._run("all_gather", seq, send, recv, None, KERNELS["all_gather"], count, (0,))
        return recvbuf

    def reduce_scatter(self, sendbuf: Any, recvbuf: Any, op: Any) -> Any:
        """``recvbuf = op over ranks of sendbuf[rank*count:(rank+1)*count]`` by one kernel launch per rank.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> DeviceCollectives(comm).reduce_scatter(np.arange(3), np.zeros(3, np.int64), "sum")
        array([0, 1, 2])
        >>> comm.destroy()
        """
        comm = self.comm
        with comm.engine.call("reduce_scatter") as seq:
            self._check_usable()
            op = combine_kernels.parse_op(op)
            send, recv = comm._buffer(sendbuf, "sendbuf"), comm._buffer(recvbuf, "recvbuf")
            count = recv.size
            comm._same_size(send, "sendbuf", recv, "recvbuf", count * self.nranks, f"{self.nranks} x recvbuf.size")
            own = send[self.rank * count : (self.rank + 1) * count]
            comm._no_overlap(send, recv, allowed=_address_range(recv) == _address_range(own))
            memory.require_writable(recv, "recvbuf")
            comm.engine.mark_run(seq)
        self._run("reduce_scatter", seq, send, recv, op, KERNELS["reduce_scatter"], count, (0,))
        return recvbuf

    def broadcast(self, sendbuf: Any, recvbuf: Any, root: int) -> Any:
        """``recvbuf = sendbuf of root`` on every rank (in place without ``recvbuf``) by one kernel launch per rank.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> DeviceCollectives(comm).broadcast(np.ones(2), np.zeros(2), 0)
        array([1., 1.])
        >>> comm.destroy()
        """
        return self._rooted("broadcast", sendbuf, recvbuf, None, root)

    def reduce(self, sendbuf: Any, recvbuf: Any, op: Any, root: int) -> Any:
        """``recvbuf = op over ranks of sendbuf`` on ``root`` (in place without ``recvbuf``); the other ranks'
        ``recvbuf`` is not written. One kernel launch per rank.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> DeviceCollectives(comm).reduce(np.arange(2), np.zeros(2, np.int64), "min", 0)
        array([0, 1])
        >>> comm.destroy()
        """
        return self._rooted("reduce", sendbuf, recvbuf, op, root)

    def _rooted(self, collective: str, sendbuf: Any, recvbuf: Any, op: Any, root: int) -> Any:
        """Broadcast or reduce: the checks of the communicator's, then this rank's place in the chain."""
        comm = self.comm
        with comm.engine.call(collective) as seq:
            self._check_usable()
            op = None if op is None else combine_kernels.parse_op(op)
            root = comm._root(root)
            send = comm._buffer(sendbuf, "sendbuf")
            recv = send if recvbuf is None else comm._buffer(recvbuf, "recvbuf")
            comm._same_size(recv, "recvbuf", send, "sendbuf", send.size)
            comm._same_or_apart(send, recv)
            written = collective == "broadcast" or self.rank == root  # a reduce writes the root's recvbuf only
            if written:
                memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
            comm.engine.mark_run(seq)
        self._run(collective, seq, send, recv, op, KERNELS[collective], send.size, (root,), root, written)
        return recvbuf if recvbuf is not None else sendbuf


def run(comm: Any, collective: str, sendbuf: Any, recvbuf: Any, op: Any, root: int, algo: str | None,
        async_op: bool, proto: str | None) -> tuple[bool, Any]:  # fmt: skip
    """``(True, result)`` once the device path ran the call of ``collective`` (``all_reduce``, ``all_gather``,
    ``reduce_scatter``, ``broadcast``, ``reduce``; ``op=None`` for those that do not reduce, ``root`` for those with
    one); ``(False, None)``: the host path runs it.

    >>> import numpy as np, nbcoll
    >>> comm = nbcoll.init()
    >>> ran, x = run(comm, "all_reduce", np.arange(3.0), None, "sum", -1, "ring", False, "device")
    >>> ran, x
    (True, array([0., 1., 2.]))
    >>> comm.destroy()
    """
    explicit = proto is not None
    if (check_proto(proto) if explicit else comm.config.proto) != "device":
        return False, None
    problem = unsupported(op, algo, getattr(sendbuf, "dtype", None), async_op or comm._group.depth > 0, collective)
    if problem:
        if explicit:
            raise ValueError(problem)
        return False, None
    engine = comm.engine
    if engine.device is None:
        engine.device = DeviceCollectives(comm)
    if engine.device.fallback:
        return False, None
    args = {"all_reduce": (op,), "reduce_scatter": (op,), "all_gather": (), "broadcast": (root,), "reduce": (op, root)}
    return True, getattr(engine.device, collective)(sendbuf, recvbuf, *args[collective])
