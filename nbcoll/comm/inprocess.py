"""Ranks as threads of one process: a stand-in for the few MPI calls a communicator makes, and memory they share.

A :class:`~nbcoll.comm.communicator.Communicator` talks to MPI for its wiring and control messages only
(bootstrap, split, refusal notes, abort messages, the ``NBCOLL_CHECK`` exchange) and, between nodes, for chunks.
:class:`ThreadComm` answers those calls for ranks that are threads of this process: the same methods, the same
matching rules (messages from one sender arrive in order; receives match in the order they were posted), with
queues under one lock instead of a network. :class:`~nbcoll.comm.local_memory.LocalBuffer`
stands in for :class:`~nbcoll.ipc_memory.IpcBuffer`: the FIFOs, the control page and the direct windows are plain
arrays that every thread sees.

Every blocking call is bounded by the timeout of its :class:`~nbcoll.comm.fabric.Fabric` (the mailboxes and
meeting points the threads share), and ends at once when the fabric fails (a rank's thread raised): the error names
the call, the rank, and the ranks it waited for.

Example::

    fabric = Fabric(nranks=2, timeout=60)
    world = [ThreadComm(fabric, ("world",), rank, 2) for rank in range(2)]
    # on thread r: Communicator(world[r]) builds rank r's communicator (see nbcoll.comm.loopback)
"""

from __future__ import annotations

import pickle
import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from mpi4py import MPI

from nbcoll.comm.fabric import (  # noqa: F401  (POLL_SECONDS and Fabric: importable from here as before)
    POLL_SECONDS,
    Fabric,
    Message,
    Receive,
    copy_into,
)
from nbcoll.comm.local_memory import LocalBuffer


def _bytes_of(spec: Any) -> memoryview:
    """The bytes of an MPI buffer specification: ``buf`` or ``[buf, datatype]``, as a flat byte view."""
    buf = spec[0] if isinstance(spec, (list, tuple)) else spec
    return memoryview(buf).cast("B")


def _fill(status: MPI.Status | None, message: Message) -> None:
    if status is not None:
        status.Set_source(message.source)
        status.Set_tag(message.tag)
        status.Set_elements(MPI.BYTE, len(message.payload))


class ThreadRequest(MPI.Request):
    """A request whose ``Test`` asks a function.

    It is an ``MPI.Request`` (a null one to MPI itself) so that ``MPI.Request.Testall`` accepts a list of them, and
    says True: only sends that complete at once (``isend``, ``Isend``) are tested that way.
    """

    def __new__(
        cls, test: Callable[[MPI.Status | None], bool], cancel: Callable[[], None] | None = None
    ) -> ThreadRequest:
        return super().__new__(cls)

    def __init__(self, test: Callable[[MPI.Status | None], bool], cancel: Callable[[], None] | None = None) -> None:
        self._test = test
        self._cancel = cancel

    def Test(self, status: MPI.Status | None = None) -> bool:  # noqa: N802 (MPI's name)
        return bool(self._test(status))

    def Cancel(self) -> None:  # noqa: N802 (MPI's name)
        """As MPI's: a receive no message has matched yet completes, cancelled; anything else is unchanged."""
        if self._cancel is not None:
            self._cancel()


def _done(status: MPI.Status | None = None) -> bool:
    return True


class _Group:
    """The ranks of a communicator, for ``Get_group().Excl(ranks)`` and ``Create_group`` (what shrink uses)."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = ranks

    def Excl(self, ranks: list[int]) -> _Group:  # noqa: N802
        return _Group([r for r in self.ranks if r not in set(ranks)])

    def Free(self) -> None:  # noqa: N802
        pass


class ThreadComm:
    """Rank ``rank`` of a communicator of threads: nbcoll's mpi4py calls, on a :class:`~nbcoll.comm.fabric.Fabric`.

    ``context`` names the communicator: every rank's object for it has the same one, and split, dup and shrink
    derive their children's from it, so messages of different communicators never meet.
    """

    buffer_kind = LocalBuffer
    """The memory the communicator built on this shares between its ranks (bootstrap reads it)."""

    def __init__(self, fabric: Fabric, context: Hashable, rank: int, size: int) -> None:
        self.fabric, self.context, self.rank, self.size = fabric, context, rank, size
        self._calls = 0  # collective calls so far: every rank numbers them the same way
        self._groups: dict[tuple[int, ...], int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ThreadComm(rank={self.rank}, size={self.size}, context={self.context!r})"

    def Get_rank(self) -> int:  # noqa: N802
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def Compare(self, other: Any) -> int:  # noqa: N802
        return MPI.IDENT if other is self else MPI.UNEQUAL

    def Free(self) -> None:  # noqa: N802
        pass

    # -- collectives ------------------------------------------------------------------------------------------

    def _key(self, what: str) -> tuple:
        with self._lock:
            self._calls += 1
            return (self.context, self._calls, what)

    def _meet(self, what: str, value: Any) -> list[Any]:
        """Leave ``value`` and wait for every rank's; the blocking core of every collective below."""
        key = self._key(what)
        self.fabric.arrive(key, self.rank, pickle.dumps(value))

        def late() -> str:
            arrived = self.fabric.meetings.get(key, {})
            return f"rank(s) {[r for r in range(self.size) if r not in arrived]} to call {what} too"

        with self.fabric.changed:
            values = self.fabric.wait_until(lambda: self.fabric.collect(key, self.size), self.rank, what, late)
        return [pickle.loads(v) for v in values]

    def allgather(self, value: Any) -> list[Any]:
        return self._meet("allgather", value)

    def bcast(self, value: Any, root: int = 0) -> Any:
        return self._meet("bcast", value if self.rank == root else None)[root]

    def Barrier(self) -> None:  # noqa: N802
        self._meet("barrier", None)

    barrier = Barrier

    def _nonblocking(self, what: str, value: Any, on_done: Callable[[list[Any]], None]) -> ThreadRequest:
        key = self._key(what)
        self.fabric.arrive(key, self.rank, value)
        finished = False

        def test(status: MPI.Status | None = None) -> bool:
            nonlocal finished
            if not finished:
                with self.fabric.changed:
                    values = self.fabric.collect(key, self.size)
                    if values is None:
                        self.fabric.check(self.rank, what)  # nothing else would end a wait on a failed world
                        return False
                on_done(values)
                finished = True
            return True

        return ThreadRequest(test)

    def Ibarrier(self) -> ThreadRequest:  # noqa: N802
        return self._nonblocking("Ibarrier", None, lambda values: None)

    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> ThreadRequest:  # noqa: N802
        out = _bytes_of(recvbuf)
        mine = bytes(_bytes_of(sendbuf))
        return self._nonblocking("Iallgather", mine, lambda values: copy_into(out, b"".join(values), "Iallgather"))

    def _child(self, what: str, color: int, key: int) -> ThreadComm | Any:
        """Split's core: ranks of one colour, ordered by (key, rank), get a communicator of their own."""
        call = self._key(what)  # the new context, the same on every rank
        everyone = self._meet(what, (color, key))
        if color == MPI.UNDEFINED:
            return MPI.COMM_NULL
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        return ThreadComm(self.fabric, (call, color), [r for _, r in members].index(self.rank), len(members))

    def Split(self, color: int = 0, key: int = 0) -> ThreadComm | Any:  # noqa: N802
        return self._child("Split", color, key)

    def Split_type(self, split_type: int, key: int = 0) -> ThreadComm:  # noqa: N802
        return self._child("Split_type", 0, key)  # every thread shares this process's memory

    def Dup(self) -> ThreadComm:  # noqa: N802
        return self._child("Dup", 0, 0)

    def Get_group(self) -> _Group:  # noqa: N802
        return _Group(list(range(self.size)))

    def Create_group(self, group: _Group, tag: int = 0) -> ThreadComm:  # noqa: N802
        """Collective over the members of ``group`` only (the others may be gone)."""
        members = tuple(group.ranks)
        with self._lock:
            self._groups[members] = self._groups.get(members, 0) + 1
            context = (self.context, "group", members, tag, self._groups[members])
        child = ThreadComm(self.fabric, context, members.index(self.rank), len(members))
        child.Barrier()
        return child

    # -- point to point ---------------------------------------------------------------------------------------

    def _send(self, payload: bytes, dest: int, tag: int) -> Message:
        message = Message(self.rank, tag, payload)
        self.fabric.deliver((self.context, dest), message)
        return message

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> ThreadRequest:  # noqa: N802
        self._send(bytes(_bytes_of(buf)), dest, tag)
        return ThreadRequest(_done)  # buffered at once, as MPI does with small messages

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> ThreadRequest:  # noqa: N802
        """A synchronous send: complete once a receive on the peer has matched it."""
        message = self._send(bytes(_bytes_of(buf)), dest, tag)
        return ThreadRequest(lambda status=None: message.matched.is_set())

    def isend(self, obj: Any, dest: int, tag: int = 0) -> ThreadRequest:
        self._send(pickle.dumps(obj), dest, tag)
        return ThreadRequest(_done)

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> ThreadRequest:  # noqa: N802
        box = (self.context, self.rank)
        receive = Receive(_bytes_of(buf), source, tag)
        with self.fabric.changed:
            self.fabric.posted.setdefault(box, deque()).append(receive)
            self.fabric.match(box)

        def test(status: MPI.Status | None = None) -> bool:
            if receive.cancelled:
                return True
            if receive.message is None:
                return False
            if receive.error is not None:
                raise receive.error
            _fill(status, receive.message)
            return True

        def cancel() -> None:
            with self.fabric.changed:
                receives = self.fabric.posted.get(box, deque())
                for k, posted in enumerate(receives):
                    if posted is receive:  # by identity: two receives into equal buffers compare equal
                        del receives[k]
                        receive.cancelled = True
                        break

        return ThreadRequest(test, cancel)

    def Iprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: MPI.Status | None = None) -> bool:  # noqa: N802
        with self.fabric.changed:
            for message in self.fabric.mailboxes.get((self.context, self.rank), ()):
                if source in (MPI.ANY_SOURCE, message.source) and tag in (MPI.ANY_TAG, message.tag):
                    _fill(status, message)
                    return True
        return False

    def Improbe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: MPI.Status | None = None) -> Any:  # noqa: N802
        with self.fabric.changed:
            message = self.fabric.take((self.context, self.rank), source, tag)
        if message is None:
            return None
        _fill(status, message)
        return _Matched(message)

    def _wait_message(self, source: int, tag: int, what: str) -> Message:
        box = (self.context, self.rank)
        with self.fabric.changed:
            return self.fabric.wait_until(
                lambda: self.fabric.take(box, source, tag), self.rank, what, lambda: f"a message from rank {source}"
            )

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> None:  # noqa: N802
        message = self._wait_message(source, tag, "Recv")
        copy_into(_bytes_of(buf), message.payload, f"a message from rank {message.source}")
        _fill(status, message)

    def recv(self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        message = self._wait_message(source, tag, "recv")
        _fill(status, message)
        return pickle.loads(message.payload)


class _Matched:
    """What ``Improbe`` returns: the message it took, received with ``Recv``."""

    def __init__(self, message: Message) -> None:
        self.message = message

    def Recv(self, buf: Any, status: Any = None) -> None:  # noqa: N802
        copy_into(_bytes_of(buf), self.message.payload, f"a message from rank {self.message.source}")
        _fill(status, self.message)
