"""Ranks joined by a key-value store: the few MPI calls a communicator makes, answered through ``set``/``get``.

Under ``torchrun`` there is no MPI world: every process is an MPI singleton, and MPI cannot connect singletons.
NCCL bootstraps from a unique id that rank 0 hands to the others; torch hands every backend a
:class:`torch.distributed.Store` instead. A :class:`~nbcoll.comm.communicator.Communicator` needs MPI for its wiring
and control messages only (bootstrap, split, shrink, refusal notes, abort messages, the window handles) and, between
machines, for chunks: :class:`StoreComm` answers those calls over the store, as
:class:`~nbcoll.comm.inprocess.ThreadComm` answers them over queues for ranks that are threads. The chunks of every
collective still travel through the shared-memory FIFOs bootstrap maps, never through the store.

How each call is carried (every key under the communicator's ``context``)::

    collective call k      every rank sets  "<context>/<k><what>/<rank>" and waits for the others' keys
    message to rank d      the sender draws  seq = add("<context>/to<d>/n", 1)  and sets "<context>/to<d>/<seq>";
                           rank d reads new seqs in order into its mailbox, where receives match as in MPI
                           (one sender's messages in order; receives in the order posted)
    synchronous send       complete once rank d has set "<context>/to<d>/<seq>/taken"

Example::

    store = torch.distributed.TCPStore("127.0.0.1", 29500, 2, is_master=rank == 0)
    comm = Communicator(StoreComm(store, rank, 2, timeout=60.0))       # what the torch backend does
"""

from __future__ import annotations

import datetime
import pickle
import threading
import time
from collections import deque
from typing import Any

from mpi4py import MPI

from nbcoll.comm.errors import CommTimeoutError
from nbcoll.comm.fabric import Message, Receive, copy_into
from nbcoll.comm.inprocess import ThreadRequest, _bytes_of, _fill, _Matched

POLL_SECONDS = 0.001
"""How long a blocked receive sleeps between two looks at its mailbox."""


class _Group:
    """The ranks of a communicator, for ``Get_group().Excl(ranks)`` and ``Create_group`` (what shrink uses)."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = ranks

    def Excl(self, ranks: list[int]) -> _Group:  # noqa: N802 (MPI's name)
        return _Group([r for r in self.ranks if r not in set(ranks)])

    def Free(self) -> None:  # noqa: N802
        pass


class StoreComm:
    """Rank ``rank`` of ``size`` ranks whose MPI calls go through ``store`` (a :class:`torch.distributed.Store`).

    Example::

        comm = StoreComm(store, rank=rank, size=2, timeout=60.0)
        everyone = comm.allgather(socket.gethostname())     # collective, as MPI's

    Every blocking call ends after ``timeout`` seconds with a :class:`~nbcoll.comm.errors.CommTimeoutError` that
    names the call and the ranks it waited for.
    """

    def __init__(self, store: Any, rank: int, size: int, timeout: float, context: str = "nbcoll") -> None:
        self.store, self.rank, self.size, self.timeout, self.context = store, rank, size, timeout, context
        self._calls = 0  # collective calls so far: every rank numbers them the same way
        self._groups: dict[tuple[int, ...], int] = {}
        self._lock = threading.RLock()  # the communicator's progress thread probes while the caller's thread runs
        self._read = 0  # messages of this rank's mailbox read from the store so far
        self._mailbox: deque[tuple[Message, int, bool]] = deque()  # (message, seq, synchronous)
        self._posted: deque[Receive] = deque()

    def __repr__(self) -> str:
        return f"StoreComm(rank={self.rank}, size={self.size}, context={self.context!r})"

    def Get_rank(self) -> int:  # noqa: N802
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def Compare(self, other: Any) -> int:  # noqa: N802
        return MPI.IDENT if other is self else MPI.UNEQUAL

    def Free(self) -> None:  # noqa: N802
        pass

    # -- collectives ------------------------------------------------------------------------------------------

    def _call_key(self, what: str) -> str:
        with self._lock:
            self._calls += 1
            return f"{self.context}/{self._calls}{what}"

    def _wait_keys(self, keys: list[str], what: str, ranks: list[int]) -> None:
        try:
            self.store.wait(keys, datetime.timedelta(seconds=self.timeout))
        except Exception as exc:  # the store's own timeout error, whose type depends on the store
            missing = [r for r, key in zip(ranks, keys, strict=True) if not self.store.check([key])]
            raise CommTimeoutError(
                f"rank {self.rank}: {what} waited {self.timeout:g} s (NBCOLL_TIMEOUT) for rank(s) {missing} to "
                f"call it too"
            ) from exc

    def _meet(self, what: str, value: Any, only: int | None = None) -> list[Any]:
        """Leave ``value`` and read every rank's (or rank ``only``'s, the others' being ``None``)."""
        key = self._call_key(what)
        self.store.set(f"{key}/{self.rank}", pickle.dumps(value))
        ranks = list(range(self.size)) if only is None else [only]
        keys = [f"{key}/{r}" for r in ranks]
        self._wait_keys(keys, what, ranks)
        values = dict(zip(ranks, (pickle.loads(v) for v in self.store.multi_get(keys)), strict=True))
        return [values.get(r) for r in range(self.size)]

    def allgather(self, value: Any) -> list[Any]:
        return self._meet("allgather", value)

    def bcast(self, value: Any, root: int = 0) -> Any:
        return self._meet("bcast", value if self.rank == root else None, only=root)[root]

    def Barrier(self) -> None:  # noqa: N802
        self._meet("barrier", None)

    barrier = Barrier

    def _nonblocking(self, what: str, value: bytes, on_done: Any) -> ThreadRequest:
        key = self._call_key(what)
        self.store.set(f"{key}/{self.rank}", value)
        keys = [f"{key}/{r}" for r in range(self.size)]
        finished = False

        def test(status: MPI.Status | None = None) -> bool:
            nonlocal finished
            if not finished:
                if not self.store.check(keys):
                    return False
                on_done(self.store.multi_get(keys))
                finished = True
            return True

        return ThreadRequest(test)

    def Ibarrier(self) -> ThreadRequest:  # noqa: N802
        return self._nonblocking("Ibarrier", b"", lambda values: None)

    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> ThreadRequest:  # noqa: N802
        out = _bytes_of(recvbuf)
        mine = bytes(_bytes_of(sendbuf))
        return self._nonblocking("Iallgather", mine, lambda values: copy_into(out, b"".join(values), "Iallgather"))

    def _child(self, what: str, color: int, key: int) -> StoreComm | Any:
        """Split's core: ranks of one colour, ordered by (key, rank), get a communicator of their own."""
        everyone = self._meet(what, (color, key))
        if color == MPI.UNDEFINED:
            return MPI.COMM_NULL
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        context = f"{self.context}/{self._calls}{what}{color}"  # the same on every rank of the colour
        return StoreComm(self.store, [r for _, r in members].index(self.rank), len(members), self.timeout, context)

    def Split(self, color: int = 0, key: int = 0) -> StoreComm | Any:  # noqa: N802
        return self._child("Split", color, key)

    def Split_type(self, split_type: int, key: int = 0) -> StoreComm:  # noqa: N802
        return self._child("Split_type", 0, key)  # the torch backend checks that all ranks share one machine

    def Dup(self) -> StoreComm:  # noqa: N802
        return self._child("Dup", 0, 0)

    def Get_group(self) -> _Group:  # noqa: N802
        return _Group(list(range(self.size)))

    def Create_group(self, group: _Group, tag: int = 0) -> StoreComm:  # noqa: N802
        """Collective over the members of ``group`` only (the others take no part)."""
        members = tuple(group.ranks)
        with self._lock:
            self._groups[members] = self._groups.get(members, 0) + 1
            number = self._groups[members]
        context = f"{self.context}/group{'-'.join(map(str, members))}t{tag}n{number}"
        child = StoreComm(self.store, members.index(self.rank), len(members), self.timeout, context)
        child.Barrier()
        return child

    # -- point to point ---------------------------------------------------------------------------------------

    def _box(self, rank: int) -> str:
        return f"{self.context}/to{rank}"

    def _send(self, payload: bytes, dest: int, tag: int, synchronous: bool = False) -> str:
        box = self._box(dest)
        seq = self.store.add(f"{box}/n", 1)  # one sender's messages get growing numbers: they arrive in order
        self.store.set(f"{box}/{seq}", pickle.dumps((self.rank, tag, payload, synchronous)))
        return f"{box}/{seq}/taken"

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> ThreadRequest:  # noqa: N802
        self._send(bytes(_bytes_of(buf)), dest, tag)
        return ThreadRequest(lambda status=None: True)  # in the store at once, as MPI buffers small messages

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> ThreadRequest:  # noqa: N802
        """A synchronous send: complete once a receive on the peer has matched it."""
        taken = self._send(bytes(_bytes_of(buf)), dest, tag, synchronous=True)
        return ThreadRequest(lambda status=None: self.store.check([taken]))

    def isend(self, obj: Any, dest: int, tag: int = 0) -> ThreadRequest:
        self._send(pickle.dumps(obj), dest, tag)
        return ThreadRequest(lambda status=None: True)

    def _poll(self) -> None:
        """Move the messages sent to this rank since the last look from the store into the mailbox; match."""
        with self._lock:
            box = self._box(self.rank)
            arrived = self.store.add(f"{box}/n", 0)
            for seq in range(self._read + 1, arrived + 1):
                source, tag, payload, synchronous = pickle.loads(self.store.get(f"{box}/{seq}"))  # set just after add
                self.store.delete_key(f"{box}/{seq}")
                self._mailbox.append((Message(source, tag, payload), seq, synchronous))
            self._read = max(self._read, arrived)
            for receive in list(self._posted):
                message = self._take(receive.source, receive.tag)
                if message is not None:
                    self._posted.remove(receive)
                    try:
                        copy_into(receive.buffer, message.payload, f"a message from rank {message.source}")
                    except ValueError as exc:  # raised on the receiver's side, as MPI's truncation error is
                        receive.error = exc
                    receive.message = message

    def _take(self, source: int, tag: int) -> Message | None:
        """Remove and return the oldest message of the mailbox that matches (holding the lock)."""
        for entry in self._mailbox:
            message, seq, synchronous = entry
            if source in (MPI.ANY_SOURCE, message.source) and tag in (MPI.ANY_TAG, message.tag):
                self._mailbox.remove(entry)
                if synchronous:
                    self.store.set(f"{self._box(self.rank)}/{seq}/taken", b"")
                return message
        return None

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> ThreadRequest:  # noqa: N802
        receive = Receive(_bytes_of(buf), source, tag)
        with self._lock:
            self._posted.append(receive)
        self._poll()

        def test(status: MPI.Status | None = None) -> bool:
            if receive.cancelled:
                return True
            if receive.message is None:
                self._poll()
                if receive.message is None:
                    return False
            if receive.error is not None:
                raise receive.error
            _fill(status, receive.message)
            return True

        def cancel() -> None:
            with self._lock:
                if receive in self._posted and receive.message is None:
                    self._posted.remove(receive)
                    receive.cancelled = True

        return ThreadRequest(test, cancel)

    def Iprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: MPI.Status | None = None) -> bool:  # noqa: N802
        self._poll()
        with self._lock:
            for message, _, _ in self._mailbox:
                if source in (MPI.ANY_SOURCE, message.source) and tag in (MPI.ANY_TAG, message.tag):
                    _fill(status, message)
                    return True
        return False

    def Improbe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: MPI.Status | None = None) -> Any:  # noqa: N802
        self._poll()
        with self._lock:
            message = self._take(source, tag)
        if message is None:
            return None
        _fill(status, message)
        return _Matched(message)

    def _wait_message(self, source: int, tag: int, what: str) -> Message:
        deadline = time.monotonic() + self.timeout
        while True:
            self._poll()
            with self._lock:
                message = self._take(source, tag)
            if message is not None:
                return message
            if time.monotonic() > deadline:
                raise CommTimeoutError(
                    f"rank {self.rank}: {what} waited {self.timeout:g} s (NBCOLL_TIMEOUT) for a message from rank "
                    f"{source}"
                )
            time.sleep(POLL_SECONDS)

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> None:  # noqa: N802
        message = self._wait_message(source, tag, "Recv")
        copy_into(_bytes_of(buf), message.payload, f"a message from rank {message.source}")
        _fill(status, message)

    def recv(self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        message = self._wait_message(source, tag, "recv")
        _fill(status, message)
        return pickle.loads(message.payload)
