"""torch's ``Work`` for the torch backend: it waits on nbcoll's asynchronous :class:`~nbcoll.comm.work.Work`.

``torch.distributed`` asks a backend for a ``Work`` on every call and waits on it at once unless the caller passed
``async_op=True``; ``DistributedDataParallel`` instead chains its gradient division onto ``get_future()``. So every
collective is started with nbcoll's ``async_op=True`` (the communicator's progress thread runs it), and
:class:`NbcollWork` finishes it::

    wait()          wait for each nbcoll Work, then run ``finish`` once (copy staged results into the tensors)
    get_future()    a torch Future, completed by a thread that calls wait(): torch's callbacks run after it

Example::

    work = NbcollWork("all_reduce", [comm.all_reduce(staged.array, async_op=True)], staged.write_back, [tensor])
    work.wait()                 # tensor holds the sum
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.futures import Future


class NbcollWork(dist.Work):
    """The handle torch waits on: nbcoll's pending works (``None`` for a part that ran already) and a finish.

    Example::

        work = dist.all_reduce(tensor, async_op=True)     # an NbcollWork on the "nbcoll" backend
        compute_something_else()
        work.wait()
    """

    def __init__(self, name: str, pending: list[Any], finish: Callable[[], None], tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self.name = name
        self._pending = [work for work in pending if work is not None]
        self._finish = finish
        self._tensors = tensors
        self._finished = False
        self._lock = threading.Lock()  # wait() from the caller and from a future's thread: finish runs once
        self._error: BaseException | None = None
        self._future: Future | None = None

    def is_completed(self) -> bool:
        """True once every nbcoll work of the call has finished (successfully or not)."""
        return self._finished or all(work.is_completed() for work in self._pending)

    def is_success(self) -> bool:
        return self.is_completed() and self._error is None

    def wait(self, timeout: datetime.timedelta | float | None = None) -> bool:
        """Block until the collective is done and its results are in the tensors; re-raise its error."""
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        seconds = None if not seconds else seconds  # torch's "no timeout" is a zero timedelta
        with self._lock:
            if not self._finished:
                try:
                    for work in self._pending:
                        work.wait(seconds)
                    self._finish()
                except BaseException as exc:
                    self._error = exc
                finally:
                    self._finished = True
        if self._error is not None:
            raise self._error
        return True

    def result(self) -> list[torch.Tensor]:
        """The output tensors (after :meth:`wait`)."""
        return self._tensors

    def get_future(self) -> Future:
        """A Future of the output tensors, completed (or failed) as soon as the collective is."""
        with self._lock:
            if self._future is not None:
                return self._future
            self._future = future = Future()
        if self.is_completed():
            self._complete(future)
        else:
            threading.Thread(target=self._complete, args=(future,), name=f"nbcoll-{self.name}", daemon=True).start()
        return future

    def _complete(self, future: Future) -> None:
        try:
            self.wait()
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(self._tensors)


def done(name: str, tensors: list[torch.Tensor]) -> NbcollWork:
    """The work of a call that ran to its end already (point-to-point, or nothing to move)."""
    return NbcollWork(name, [], lambda: None, tensors)
