"""Asynchronous collectives: a :class:`Work` handle, and the one queue per communicator that runs every operation.

``comm.all_reduce(x, async_op=True)`` returns at once with a :class:`Work`; a background thread drives the
collective's steps while the caller computes, and ``work.wait()`` returns its result. Every operation of the
communicator (collectives, groups, sends and receives, synchronous or not) goes through the same queue, strictly
in the order it was issued, because every rank must use its connections in the same order and two operations
must never share a connection at once. A synchronous call with nothing in flight runs on the caller's thread,
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


def records_of(op: Any) -> list[Any]:
    """The flight-recorder records of an operation: one, or one per collective of a fused group."""
    return [part[-1] for part in op.parts] if hasattr(op, "parts") else [op.record]


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
    """Runs a communicator's operations one batch at a time, in issue order, on the caller's thread or a background one.

    Every operation of a communicator goes through its one :class:`Progress`: collectives, groups, sends and
    receives. A batch that waits behind another runs on the background thread; a synchronous batch with nothing
    queued or running runs at once on the caller's thread. Either way no two batches ever share the connections.

    Example::

        progress = Progress(drive=watchdog.drive, name="nbcoll-progress-rank0")
        progress.submit([op], [work], wait=False)       # returns at once; work finishes when op is done
    """

    def __init__(self, drive: Callable[[list[Any]], None], name: str) -> None:
        self._drive = drive
        self._name = name
        self._queue: deque[tuple[list[Any], list[Work]]] = deque()
        self._lock = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, ops: list[Any], works: list[Work], wait: bool) -> None:
        """Run ``ops`` after everything submitted before, then finish each of ``works`` with the outcome.

        ``wait=True`` returns when the batch is done and re-raises its error.
        """
        with self._lock:
            inline = wait and not self._busy and not self._queue
            if inline:
                self._busy = True
            else:
                if wait:
                    works = [*works, Work(f"{len(ops)} operation(s) on {self._name}", None)]  # to wait on
                self._queue.append((ops, works))
                if self._thread is None:  # cleared under this lock by a thread that has left its loop
                    self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                    self._thread.start()
                self._lock.notify_all()
        if inline:
            error = self._run(ops, works)
            if error is not None:
                raise error
        elif wait:
            works[-1].wait()

    def _run(self, ops: list[Any], works: list[Work]) -> BaseException | None:
        error = None
        try:
            self._drive(ops)
        except BaseException as exc:  # handed to every waiting caller
            error = exc
        finally:
            with self._lock:
                self._busy = False
                self._lock.notify_all()
        for work in works:
            work._finish(error)
        return error

    def _loop(self) -> None:
        while True:
            with self._lock:
                while self._queue and self._busy:  # a synchronous batch is running inline: wait for it
                    self._lock.wait()
                if not self._queue:
                    # Decided under the lock, so a batch submitted from now on sees no thread and starts one.
                    self._thread = None
                    return
                ops, works = self._queue.popleft()
                self._busy = True
            self._run(ops, works)

    def quiesce(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or running; return whether that happened within ``timeout``."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._busy and not self._queue, timeout)

    def cancel(self, error: BaseException) -> None:
        """Fail every batch still queued (not the one running) with ``error``."""
        with self._lock:
            batches, self._queue = list(self._queue), deque()
        for ops, works in batches:
            for op in ops:
                for record in records_of(op):
                    record.finish("cancelled")
            for work in works:
                work._finish(error)
