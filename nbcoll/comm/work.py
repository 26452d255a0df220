"""Asynchronous collectives: a :class:`Work` handle, and the one thread per communicator that progresses them.

``comm.all_reduce(x, async_op=True)`` returns at once with a :class:`Work`; a background thread drives the
collective's steps while the caller computes, and ``work.wait()`` returns its result. The thread takes
collectives strictly in the order they were issued, synchronous ones included, because every rank must use
its connections in the same order. A synchronous call with nothing in flight runs on the caller's thread,
with no hand-over.

Example::

    work = comm.all_reduce(grads, async_op=True)
    loss = forward(next_batch)          # overlaps the all-reduce
    work.wait()                         # grads now holds the sum
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from nbcoll.comm.errors import CommTimeoutError


class Work:
    """The handle of one asynchronous collective.

    Example::

        work = comm.broadcast(x, root=0, async_op=True)
        while not work.is_completed():
            do_something_else()
        result = work.wait()
    """

    def __init__(self, description: str, result: Any) -> None:
        self.description = description
        self.result = result
        self._done = threading.Event()
        self._error: BaseException | None = None

    def is_completed(self) -> bool:
        """True once the collective has finished, successfully or not."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the collective is done and return its result buffer; re-raise its error if it failed.

        A ``timeout`` in seconds bounds the wait (the collective itself is bounded by ``NBCOLL_TIMEOUT``).
        """
        if not self._done.wait(timeout):
            raise CommTimeoutError(f"Work.wait: {self.description} did not finish within {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self.result

    def _finish(self, error: BaseException | None) -> None:
        self._error = error
        self._done.set()


class Progress:
    """Runs a communicator's collectives, in issue order, on the caller's thread or a background one."""

    def __init__(self, drive: Callable[[list[Any]], None], name: str) -> None:
        self._drive = drive
        self._name = name
        self._queue: deque[tuple[Any, Work]] = deque()
        self._lock = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None

    def run(self, op: Any, work: Work, async_op: bool) -> Any:
        with self._lock:
            inline = not async_op and not self._busy and not self._queue
            if inline:
                self._busy = True
            else:
                self._queue.append((op, work))
                self._ensure_thread()
                self._lock.notify_all()
        if inline:
            try:
                self._drive([op])
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()
            return work.result
        return work if async_op else work.wait()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while self._busy or not self._queue:
                    if not self._queue:
                        return  # idle: the next submission starts a new thread
                    self._lock.wait()
                op, work = self._queue.popleft()
                self._busy = True
            error = None
            try:
                self._drive([op])
            except BaseException as exc:  # handed to the waiting caller
                error = exc
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()
            work._finish(error)

    def quiesce(self, timeout: float | None = None) -> None:
        """Wait until nothing is queued or running (the communicator calls this before it is destroyed)."""
        with self._lock:
            self._lock.wait_for(lambda: not self._busy and not self._queue, timeout)
