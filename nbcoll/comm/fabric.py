"""The fabric of a loopback world: the mailboxes and meeting points that its ranks, threads of one process, share.

:class:`~nbcoll.comm.inprocess.ThreadComm` answers the MPI calls of a communicator whose ranks are threads; what
those calls exchange lives here, under one lock (the condition ``Fabric.changed``), instead of on a network::

    deliver(box, message)        a message lands in the mailbox of (communicator, destination rank), then
    match(box)                   each posted receive, oldest first, takes the oldest arrived message it matches
    arrive(key, rank, value)     a member of a collective call leaves its value at the meeting point ``key``,
    collect(key, size)           and every member reads them all, in rank order, once all have arrived
    wait_until(ready, ...)       a blocked call waits for news, bounded by the fabric's timeout
    fail(why)                    a rank's thread failed: every blocked call of the world raises at once

Example::

    fabric = Fabric(nranks=2, timeout=60)
    world = [ThreadComm(fabric, ("world",), rank, 2) for rank in range(2)]     # what nbcoll.comm.loopback does
    fabric.fail("rank 1 raised KeyError")                                      # the other ranks' waits end
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from nbcoll.comm.errors import CommAbortedError, CommTimeoutError

POLL_SECONDS = 0.05
"""How often a blocked call looks at the fabric's failure flag and its deadline (it wakes at once on news)."""


@dataclass
class Message:
    """A message in a mailbox: its sender, its tag, its bytes, and an event set once a receive has taken it.

    >>> message = Message(source=0, tag=7, payload=b"hi")
    >>> message.matched.is_set()                     # a synchronous send completes when it is
    False
    """

    source: int
    tag: int
    payload: bytes
    matched: threading.Event = field(default_factory=threading.Event)


@dataclass
class Receive:
    """A posted receive: filled by the first message that matches it, in posting order.

    >>> receive = Receive(memoryview(bytearray(2)), source=0, tag=7)
    >>> receive.message is None                      # no message has matched it yet
    True
    """

    buffer: memoryview | None
    source: int
    tag: int
    message: Message | None = None
    error: Exception | None = None
    cancelled: bool = False


class Fabric:
    """What the threads of one loopback world share: a lock, mailboxes, meeting points, and a failure flag.

    >>> fabric = Fabric(nranks=2, timeout=1.0)
    >>> fabric.deliver(("world", 1), Message(source=0, tag=7, payload=b"hi"))    # to rank 1 of "world"
    >>> with fabric.changed:
    ...     fabric.take(("world", 1), source=0, tag=7).payload
    b'hi'
    """

    def __init__(self, nranks: int, timeout: float) -> None:
        self.nranks = nranks
        self.timeout = timeout
        self.changed = threading.Condition()
        self.mailboxes: dict[tuple[Hashable, int], deque[Message]] = {}
        self.posted: dict[tuple[Hashable, int], deque[Receive]] = {}
        self.meetings: dict[Hashable, dict[int, Any]] = {}
        self.readers: dict[Hashable, int] = {}
        self.failure: str | None = None

    def fail(self, why: str) -> None:
        """Every blocked call of this world raises from now on (a rank's thread failed)."""
        with self.changed:
            if self.failure is None:
                self.failure = why
            self.changed.notify_all()

    def check(self, rank: int, what: str) -> None:
        if self.failure is not None:
            raise CommAbortedError(f"rank {rank}: {what} stopped: {self.failure}")

    def wait_until(self, ready: Callable[[], Any], rank: int, what: str, waiting_for: Callable[[], str]) -> Any:
        """Block (holding ``changed``) until ``ready()`` returns something true; bounded by the timeout."""
        deadline = time.monotonic() + self.timeout
        while not (result := ready()):
            self.check(rank, what)
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommTimeoutError(
                    f"rank {rank}: {what} waited {self.timeout:g} s (NBCOLL_TIMEOUT) for {waiting_for()}"
                )
            self.changed.wait(min(POLL_SECONDS, left))
        return result

    # Meetings: every member of a communicator leaves a value under the same key; all read them all.

    def arrive(self, key: Hashable, rank: int, value: Any) -> None:
        with self.changed:
            self.meetings.setdefault(key, {})[rank] = value
            self.changed.notify_all()

    def collect(self, key: Hashable, size: int) -> list[Any] | None:
        """The values of all ``size`` members in rank order once all have arrived, else ``None``; a member calls
        this until it gets them, once more after that never (call holding ``changed``)."""
        values = self.meetings.get(key, {})
        if len(values) < size:
            return None
        self.readers[key] = self.readers.get(key, 0) + 1
        if self.readers[key] == size:  # the last reader: the meeting is over
            del self.meetings[key], self.readers[key]
        return [values[r] for r in range(size)]

    # Point to point: deliver into the mailbox of (context, destination), then match posted receives in order.

    def deliver(self, box: tuple[Hashable, int], message: Message) -> None:
        with self.changed:
            self.mailboxes.setdefault(box, deque()).append(message)
            self.match(box)
            self.changed.notify_all()

    def take(self, box: tuple[Hashable, int], source: int, tag: int) -> Message | None:
        """Remove and return the oldest message that matches (call holding ``changed``)."""
        queue = self.mailboxes.get(box, deque())
        for message in queue:
            if source in (MPI.ANY_SOURCE, message.source) and tag in (MPI.ANY_TAG, message.tag):
                queue.remove(message)
                message.matched.set()
                return message
        return None

    def match(self, box: tuple[Hashable, int]) -> None:
        """Give each posted receive, oldest first, the oldest arrived message it matches (call holding ``changed``).

        A receive whose message has not come does not hold up later receives from other senders.
        """
        receives = self.posted.get(box, deque())
        for receive in list(receives):
            message = self.take(box, receive.source, receive.tag)
            if message is None:
                continue
            receives.remove(receive)
            try:
                copy_into(receive.buffer, message.payload, f"a message from rank {message.source}")
            except ValueError as exc:  # raised on the receiver's side, as MPI's truncation error is
                receive.error = exc
            # Last: the receiver's Test reads this without the lock, and reads the buffer once it is set, so the
            # bytes must be in place first (set before the copy, a receiver could read a slot's old chunk).
            receive.message = message


def copy_into(buffer: memoryview | None, payload: bytes, what: str) -> None:
    """Copy ``payload`` to the start of ``buffer`` (nothing when it is ``None``); one longer than the buffer is a
    ``ValueError`` that names ``what``."""
    if buffer is None:
        return
    if len(payload) > len(buffer):
        raise ValueError(f"{what} of {len(payload)} bytes does not fit the receive buffer of {len(buffer)} bytes")
    buffer[: len(payload)] = payload
