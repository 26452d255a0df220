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

Outside a group, each operation is a group of one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Group:
    """Nesting depth and queued operations of one communicator's groups.

    Example::

        group = Group(drive=watchdog.drive)
        with group:
            group.submit(op)        # queued: the group is open
        group.submit(op2)           # driven at once: no group is open
    """

    def __init__(self, drive: Callable[[list[Any]], None]) -> None:
        self._drive = drive
        self.depth = 0
        self.queued: list[Any] = []

    def submit(self, op: Any) -> None:
        if self.depth:
            if self.queued and (op.kind == "collective") != (self.queued[0].kind == "collective"):
                raise ValueError(
                    "comm.group(): a group holds either collectives or point-to-point operations, not both; "
                    "put them in separate groups"
                )
            self.queued.append(op)
        else:
            self._drive([op])

    def __enter__(self) -> Group:
        self.depth += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.depth -= 1
        if self.depth:
            return
        ops, self.queued = self.queued, []
        if exc_type is not None:
            for op in ops:  # the block failed before the group ran: nothing was sent or received
                op.record.finish("cancelled")
            return
        self._drive(ops)
