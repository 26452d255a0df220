"""Point-to-point as methods of the communicator: ``send``, ``recv``, ``isend``, ``irecv``, ``batch_isend_irecv``,
``group`` and ``drive``.

Each method checks its arguments once, records the message in the flight recorder, and hands one operation of
:mod:`nbcoll.comm.p2p` on. ``send`` and ``recv`` go to the communicator's group (:mod:`nbcoll.comm.group`): run at
once, or queued until the outermost ``with comm.group():`` ends. ``isend``, ``irecv`` and ``batch_isend_irecv``
(PyTorch's names) return a :class:`~nbcoll.comm.work.Work` at once and leave the operation to the progress queue
(:mod:`nbcoll.comm.progress`), as ``async_op=True`` does for a collective; inside a group they are queued with it.
``drive`` runs operations built elsewhere (a collective algorithm's) through the same queue.

Every operation runs in issue order on that one queue, one batch after the other. So a lone ``isend`` larger than
the FIFO, followed by an ``irecv``, is the classic deadlock whenever the peer does the same: each send waits for
a receive that is queued behind it. ``batch_isend_irecv`` (or a group) makes the pair one batch, run round robin.

Example::

    with comm.group():                               # a ring of exchanges cannot deadlock inside a group
        comm.send(x, (comm.rank + 1) % comm.size)
        comm.recv(y, (comm.rank - 1) % comm.size)

    works = comm.batch_isend_irecv([P2POp(comm.isend, x, right), P2POp(comm.irecv, y, left)])
    compute()                                        # while the exchange runs
    for work in works:
        work.wait()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nbcoll import memory
from nbcoll.comm.group import Group
from nbcoll.comm.p2p import RecvOp, SendOp, describe_array
from nbcoll.comm.work import Work

_KINDS = ("isend", "irecv")


@dataclass(frozen=True, eq=False)  # eq=False: buffers are arrays, compared by identity
class P2POp:
    """One send or receive of :meth:`PointToPoint.batch_isend_irecv`, as PyTorch's ``dist.P2POp``.

    ``op`` is ``comm.isend`` or ``comm.irecv`` (the method itself, as PyTorch passes ``dist.isend``) or its name,
    ``"isend"`` or ``"irecv"``; ``buf`` is a contiguous device array and ``peer`` the other rank. The buffer and
    the peer are checked by ``batch_isend_irecv``, as ``send`` and ``recv`` check theirs.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.comm import P2POp
    >>> comm = nbcoll.init()
    >>> x = nbcoll.to_device(np.arange(4, dtype=np.float32))
    >>> P2POp(comm.isend, x, peer=1).kind, P2POp("irecv", x, peer=1).kind
    ('isend', 'irecv')
    >>> P2POp(comm.send, x, peer=1)
    Traceback (most recent call last):
        ...
    ValueError: op: expected comm.isend, comm.irecv, 'isend' or 'irecv', got a function or method named 'send'
    >>> comm.destroy()
    """

    op: Any
    buf: Any
    peer: int

    def __post_init__(self) -> None:
        name = self.op if isinstance(self.op, str) else getattr(self.op, "__name__", None)
        if name not in _KINDS:
            got = f"a function or method named {name!r}" if callable(self.op) else repr(self.op)
            raise ValueError(f"op: expected comm.isend, comm.irecv, 'isend' or 'irecv', got {got}")

    @property
    def kind(self) -> str:
        """``"isend"`` or ``"irecv"``: what the operation does, whichever way ``op`` named it.

        >>> from nbcoll.comm import P2POp
        >>> P2POp("isend", None, peer=1).kind
        'isend'
        """
        return self.op if isinstance(self.op, str) else self.op.__name__


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
        data, peer = self._checked("send", buf, peer)
        self._group.submit(self._transfer("send", data, peer))

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
        data, peer = self._checked("recv", buf, peer)
        self._group.submit(self._transfer("recv", data, peer))

    def isend(self, buf: Any, peer: int) -> Work:
        """:meth:`send`, without waiting: returns a :class:`~nbcoll.comm.work.Work` at once.

        The send runs on the communicator's progress queue, after everything issued before it, while the caller
        goes on; ``work.wait()`` returns ``buf`` once every chunk is in the peer's FIFO, or raises the send's
        error (a timeout naming the operation, the rank and the peer; an abort; a lost peer). ``buf`` must not
        change until then. Inside :meth:`group` it is queued with the group and done when the group ends.
        Operations run one after the other in issue order, so an ``isend`` larger than the FIFO followed by an
        ``irecv`` deadlocks when the peer does the same: exchange with :meth:`batch_isend_irecv`.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = nbcoll.to_device(np.arange(4, dtype=np.float32))
        >>> works = [comm.isend(x, peer) for peer in range(comm.size) if peer != comm.rank]   # one rank: none
        >>> all(work.wait() is x for work in works)
        True
        >>> comm.isend(x, peer=comm.rank)          # checked as send checks, before anything is queued
        Traceback (most recent call last):
            ...
        ValueError: peer: rank 0 is this rank; a rank cannot send to or receive from itself
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.settle()
        data, peer = self._checked("send", buf, peer)
        return self._post([(self._transfer("isend", data, peer), buf)])[0]

    def irecv(self, buf: Any, peer: int) -> Work:
        """:meth:`recv`, without waiting: returns a :class:`~nbcoll.comm.work.Work` at once.

        ``work.wait()`` returns ``buf`` once the message is in it, or raises the receive's error; read ``buf``
        only after that. It runs in issue order on the communicator's queue, as :meth:`isend` does.

        >>> import numpy as np, nbcoll
        >>> from nbcoll.comm import loopback
        >>> def pass_on(comm):                    # rank 0 sends its array to rank 1
        ...     x = nbcoll.to_device(np.full(3, 10 + comm.rank, np.int64))
        ...     work = comm.isend(x, 1) if comm.rank == 0 else comm.irecv(x, 0)
        ...     return nbcoll.to_host(work.wait())
        >>> loopback.run(2, pass_on)
        [array([10, 10, 10]), array([10, 10, 10])]
        """
        self._check_usable()
        self.engine.settle()
        data, peer = self._checked("recv", buf, peer)
        return self._post([(self._transfer("irecv", data, peer), buf)])[0]

    def batch_isend_irecv(self, ops: Sequence[P2POp]) -> list[Work]:
        """Run the sends and receives of ``ops`` as one batch, without waiting; one Work per op, in order.

        The batch runs round robin, as a group does, so a ring where each rank sends right and receives from its
        left completes with messages of any size. Every op is checked before any is queued; inside :meth:`group`
        the ops are queued with the group.

        >>> import numpy as np, nbcoll
        >>> from nbcoll.comm import P2POp, loopback
        >>> def shift(comm):                       # each rank's array moves one rank to the right
        ...     x, y = nbcoll.to_device(np.full(2, comm.rank)), nbcoll.zeros(2, np.int64)
        ...     right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        ...     works = comm.batch_isend_irecv([P2POp(comm.isend, x, right), P2POp(comm.irecv, y, left)])
        ...     for work in works:
        ...         work.wait()
        ...     return nbcoll.to_host(y)
        >>> loopback.run(3, shift)
        [array([2, 2]), array([0, 0]), array([1, 1])]
        >>> comm = nbcoll.init()
        >>> comm.batch_isend_irecv([])             # one rank has no peer to exchange with
        []
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.settle()
        if not isinstance(ops, (list, tuple)):
            raise TypeError(f"ops: expected a list of P2POp, got {type(ops).__name__}")
        checked = []
        for i, p2p in enumerate(ops):
            if not isinstance(p2p, P2POp):
                raise TypeError(f"ops[{i}]: expected a P2POp(comm.isend or comm.irecv, buf, peer), got {p2p!r}")
            owner = getattr(p2p.op, "__self__", self)
            if isinstance(owner, PointToPoint) and owner is not self:
                raise ValueError(f"ops[{i}].op: a method of another communicator; a batch runs on this one")
            data, peer = self._checked(p2p.kind[1:], p2p.buf, p2p.peer, f"ops[{i}].")
            checked.append((p2p.kind, data, peer, p2p.buf))
        return self._post([(self._transfer(kind, data, peer), buf) for kind, data, peer, buf in checked])

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

    # -- what every send and receive shares -----------------------------------------------------------------

    def _checked(self, direction: str, buf: Any, peer: Any, prefix: str = "") -> tuple[Any, int]:
        """``buf`` as a flat device array and ``peer`` as a rank, checked for a ``"send"`` or a ``"recv"``;
        ``prefix`` names where they came from in the error messages (``"ops[2]."``)."""
        data = self._flat_buffer(buf, f"{prefix}buf")
        if direction == "recv":
            memory.require_writable(data, f"{prefix}buf")
        return data, self._check_peer(peer, f"{prefix}peer")

    def _transfer(self, name: str, data: Any, peer: int) -> SendOp | RecvOp:
        """The operation of a checked message, recorded in the flight recorder under ``name`` (``"irecv"``)."""
        sends = name.endswith("send")
        record = self.recorder.record(name, peer, data.size * data.dtype.itemsize, describe_array(data))
        where = "to" if sends else "from"
        self.log.info("P2P", f"{name} #{record.seq} {where} peer {peer}: {record.nbytes} bytes, {record.what}")
        if sends:
            return SendOp(self.send_connection(peer), data, self.peer_counters(peer), record)
        return RecvOp(self.recv_connection(peer), data, self.peer_counters(peer), record)

    def _post(self, transfers: list[tuple[SendOp | RecvOp, Any]]) -> list[Work]:
        """Hand ``(operation, buffer it returns)`` pairs over as one batch, without waiting: to the progress queue,
        or to the open group, whose end runs them."""
        works = []
        for op, buf in transfers:
            record, where = op.record, "to" if op.kind == "send" else "from"
            what = f"{record.op} of {record.nbytes} bytes ({record.what}) {where} peer {op.peer} on rank {self.rank}"
            works.append(Work(what, buf))
        if self._group.depth:
            for (op, _), work in zip(transfers, works, strict=True):
                self._group.submit(op, work)
        elif transfers:
            self.engine.progress.submit([op for op, _ in transfers], works, wait=False)
        return works
