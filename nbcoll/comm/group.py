"""Groups: queue point-to-point operations, then progress them all together, as ``ncclGroupStart/End`` do.

Inside ``with comm.group():`` a send or a receive is checked and queued, not run. When the outermost group
ends, every queued operation is driven at once, round robin, so a ring where each rank sends to its right and
receives from its left completes even when each message is larger than the FIFO: no rank waits on its send
while the receive that would unblock its neighbour sits unstarted.

Example::

    with comm.group():
        comm.send(x, (comm.rank + 1) % comm.size)
        comm.recv(y, (comm.rank - 1) % comm.size)
    # both are complete here

Outside a group, each operation is a group of one. ``comm.isend``, ``comm.irecv`` and ``comm.batch_isend_irecv``
inside a group queue their operations with their :class:`~nbcoll.comm.work.Work` handles, which finish when the
group's batch does (or fail, when the ``with`` body raises and nothing runs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbcoll.comm.work import Work


class Group:
    """Nesting depth, queued operations and their async handles, of one communicator's groups.

    Example::

        group = Group(run=progress_run, cancel=cancel_ops)
        with group:
            group.submit(op)        # queued: the group is open
        group.submit(op2)           # run at once (in issue order): no group is open

    ``run(ops, works)`` runs a batch through the communicator's queue and finishes ``works`` with its outcome;
    ``cancel(ops, works, error)`` gives up a batch that never ran (the ``with`` body raised).
    """

    def __init__(
        self,
        run: Callable[[list[Any], list[Work]], None],
        cancel: Callable[[list[Any], list[Work], BaseException], None],
    ) -> None:
        self._run = run
        self._cancel = cancel
        self.depth = 0
        self.queued: list[Any] = []
        self.works: list[Work] = []  # the async handles of the queued operations

    def submit(self, op: Any, work: Work | None = None) -> None:
        if self.depth:
            if self.queued and (op.kind == "collective") != (self.queued[0].kind == "collective"):
                raise ValueError(
                    "comm.group(): a group holds either collectives or point-to-point operations, not both; "
                    "put them in separate groups"
                )
            self.queued.append(op)
            if work is not None:
                self.works.append(work)
        else:
            self._run([op], [] if work is None else [work])

    def queue_collective(self, coll: Any, work: Work) -> None:
        """Queue a collective in the open group: fused after the ones already queued, so they run in issue order."""
        if any(op.kind != "collective" for op in self.queued):
            raise ValueError(
                "comm.group(): this group already holds point-to-point operations; put collectives and "
                "send/recv in separate groups"
            )
        if self.queued:
            self.queued[-1].fuse(coll)  # one operation: the collectives run in the order they were issued
        else:
            self.queued.append(coll)
        self.works.append(work)

    def __enter__(self) -> Group:
        self.depth += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.depth -= 1
        if self.depth:
            return
        ops, self.queued = self.queued, []
        works, self.works = self.works, []
        if exc_type is not None:  # the block failed before the group ran: nothing was sent or received
            self._cancel(ops, works, exc)
            return
        self._run(ops, works)
