"""Asynchronous operations: the :class:`Work` handle of an operation that runs in the background.

``comm.all_reduce(x, async_op=True)`` (and ``comm.isend``, ``comm.irecv``, ``comm.batch_isend_irecv``) returns at
once with a :class:`Work`; the communicator's progress queue (:mod:`nbcoll.comm.progress`) drives the operation's
steps on a background thread while the caller computes, and ``work.wait()`` returns its result.

Example::

    work = comm.all_reduce(grads, async_op=True)
    loss = forward(next_batch)          # overlaps the all-reduce
    work.wait()                         # grads now holds the sum
"""

from __future__ import annotations

import threading
from typing import Any

from nbcoll.comm.errors import CommTimeoutError


def records_of(op: Any) -> list[Any]:
    """The flight-recorder records of an operation: one, or one per collective of a fused group."""
    return [part[-1] for part in op.parts] if hasattr(op, "parts") else [op.record]


class Work:
    """The handle of one asynchronous collective, send or receive.

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
        """True once the operation has finished, successfully or not."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the operation is done and return its result buffer; re-raise its error if it failed.

        A ``timeout`` in seconds bounds the wait (the operation itself is bounded by ``NBCOLL_TIMEOUT``).
        """
        if not self._done.wait(timeout):
            raise CommTimeoutError(f"Work.wait: {self.description} did not finish within {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self.result

    def _finish(self, error: BaseException | None) -> None:
        self._error = error
        self._done.set()
