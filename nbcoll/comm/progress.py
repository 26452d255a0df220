"""The one queue per communicator that runs every operation, in the order it was issued.

Every operation of a communicator (collectives, groups, sends and receives, synchronous or not) goes through its
:class:`Progress`, strictly in issue order, because every rank must use its connections in the same order and two
operations must never share a connection at once. A synchronous call with nothing in flight runs on the caller's
thread, with no hand-over; anything else waits its turn on a background thread, which is what lets
``comm.all_reduce(x, async_op=True)`` return at once (:mod:`nbcoll.comm.work`). An operation that is planned
only in its turn (:mod:`nbcoll.comm.deferred`, a communicator's first one-shot call) is planned by the thread that
runs its batch, just before the batch runs, so that what the plan sets up with the peers happens in issue order.

Example::

    progress = Progress(drive=watchdog.drive, check=comm_is_usable, name="nbcoll-progress-rank0")
    progress.submit([op], [work], wait=False)       # returns at once; work finishes when op is done
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from nbcoll.comm.work import Work, records_of


class Progress:
    """Runs a communicator's operations one batch at a time, in issue order, on the caller's thread or a background one.

    A batch that waits behind another runs on the background thread; a synchronous batch with nothing queued or
    running runs at once on the caller's thread. Either way no two batches ever share the connections.
    ``check()`` runs before each batch (it raises when the communicator can no longer be used) and
    ``drive(ops)`` runs the batch to its end (the watchdog's loop).

    Example::

        progress = Progress(drive=watchdog.drive, check=lambda: None, name="nbcoll-progress-rank0")
        progress.submit([op], [], wait=True)
    """

    def __init__(self, drive: Callable[[list[Any]], None], check: Callable[[], None], name: str) -> None:
        self._drive = drive
        self._check = check
        self._name = name
        self._queue: deque[tuple[list[Any], list[Work]]] = deque()
        # One lock, taken bare on the hot path (_claim, _release) and as a condition where a thread waits; release
        # wakes the waiters only when there are some, since a replayed collective claims and releases every call.
        self._mutex = threading.RLock()
        self._lock = threading.Condition(self._mutex)
        self._waiters = 0
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, ops: list[Any], works: list[Work], wait: bool, checked: bool = False) -> None:
        """Run ``ops`` after everything submitted before, then finish each of ``works`` with the outcome.

        ``wait=True`` returns when the batch is done and re-raises its error. ``checked=True``: the caller has just
        checked that the communicator is usable (a collective's entry), so a batch run at once skips that check;
        an abort that lands in between is still noticed by the watchdog while the batch waits.
        """
        if not (wait and self._claim()):  # something runs or waits already: this batch goes behind it
            with self._lock:
                if wait:
                    works = [*works, Work(f"{len(ops)} operation(s) on {self._name}", None)]  # to wait on
                self._queue.append((ops, works))
                if self._thread is None:  # cleared under this lock by a thread that has left its loop
                    self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                    self._thread.start()
                self._lock.notify_all()
            if wait:
                works[-1].wait()
            return
        error = None
        try:  # on this thread: the caller's buffers go straight to the watchdog's loop
            if not checked:
                self._check()
            self._drive(_prepared(ops))
        except BaseException as exc:
            error = exc
        self._finish(works, error)
        if error is not None:
            raise error

    def run_here(self, run: Callable[[], Any]) -> bool:
        """``run()`` on the caller's thread if nothing is queued or running, holding the queue meanwhile; return
        whether it ran. A replayed collective whose steps are ready at once runs them so (:mod:`nbcoll.comm.replay`).
        """
        if not self._claim():
            return False
        try:
            run()
        finally:
            self._release()
        return True

    def _claim(self) -> bool:
        """Take the queue for work on the caller's thread, if nothing is queued or running; then :meth:`_release`."""
        with self._mutex:
            if self._busy or self._queue:
                return False
            self._busy = True
            return True

    def _release(self) -> None:
        """Give back the queue taken by :meth:`_claim`: a batch waiting behind may run."""
        with self._mutex:
            self._busy = False
            if self._waiters:
                self._lock.notify_all()

    def _finish(self, works: list[Work], error: BaseException | None) -> None:
        self._release()
        for work in works:
            work._finish(error)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._wait(lambda: not (self._queue and self._busy))  # a synchronous batch runs inline: wait for it
                if not self._queue:
                    # Decided under the lock, so a batch submitted from now on sees no thread and starts one.
                    self._thread = None
                    return
                ops, works = self._queue.popleft()
                self._busy = True
            error = None
            try:
                self._check()
                self._drive(_prepared(ops))
            except BaseException as exc:  # handed to every waiting caller
                error = exc
            self._finish(works, error)

    def active(self) -> bool:
        """Whether a batch is queued or running."""
        with self._mutex:
            return self._busy or bool(self._queue)

    def quiesce(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or running; return whether that happened within ``timeout``."""
        with self._lock:
            return self._wait(lambda: not self._busy and not self._queue, timeout)

    def _wait(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """(Under the lock.) ``wait_for(predicate, timeout)``, counted as a waiter, whom release() wakes."""
        self._waiters += 1
        try:
            return self._lock.wait_for(predicate, timeout)
        finally:
            self._waiters -= 1

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


def _prepared(ops: list[Any]) -> list[Any]:
    """``ops`` with each that is planned in its turn (it has ``prepare()``) replaced by the operation it plans."""
    return [op.prepare() if hasattr(op, "prepare") else op for op in ops]
