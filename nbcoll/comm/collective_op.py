"""One rank's part of a collective, run step by step by the communicator's progress loop.

An algorithm is a generator of primitives (:mod:`nbcoll.comm.algorithms`). :class:`CollectiveOp` pulls the next
primitive when the previous one has run, and runs it as soon as its peers are ready. It has the interface of a
point-to-point operation (:mod:`nbcoll.comm.p2p`), so the same watchdog drives it: the same timeout, abort and
dead-peer checks, and the same flight recorder.

Several collectives issued in one ``comm.group()`` are fused into one operation that runs their steps in the
order the collectives were issued: every rank then uses each connection in the same order, which is what
makes the fusion safe.

Example::

    op = CollectiveOp("all_reduce", "ring", ring.all_reduce(ctx, x, x), record, tracer, seq=1)
    comm.drive([op])
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

from nbcoll.comm.debug import OperationRecord
from nbcoll.comm.primitives import Step
from nbcoll.comm.trace import Tracer


class CollectiveOp:
    """Runs the primitives of one or more collectives, in order, each when it is ready."""

    kind = "collective"

    def __init__(
        self, name: str, algo: str, steps: Iterator[Step], record: OperationRecord, tracer: Tracer, seq: int
    ) -> None:
        self.parts = [(name, algo, seq, record)]
        self.steps = _labelled(steps, 0)
        self.tracer = tracer
        self.current: tuple[int, Step] | None = None
        self.last: Step | None = None
        self.step = 0  # steps run so far, for the watchdog's messages
        self.done = False

    @property
    def conn(self) -> CollectiveOp:
        # The watchdog keeps operations on one connection in order; a collective orders its own steps.
        return self

    @property
    def record(self) -> OperationRecord:
        return self.parts[self._part()][3]

    @property
    def seqs(self) -> list[int]:
        """The call numbers of the collectives in this operation, in issue order."""
        return [seq for _, _, seq, _ in self.parts]

    @property
    def peer(self) -> int:
        peers = self.current[1].peers if self.current else []
        return peers[0] if peers else -1

    def waiting_peers(self) -> list[int]:
        """Every peer the current step waits for (a direct step waits for all of them, a tree root for two)."""
        return self.current[1].waiting_peers() if self.current else []

    def fuse(self, other: CollectiveOp) -> None:
        """Append ``other``'s steps after this operation's (a group of collectives)."""
        offset = len(self.parts)
        self.parts += other.parts
        self.steps = itertools.chain(self.steps, _labelled(other.steps, offset, relabel=True))

    def _part(self) -> int:
        return self.current[0] if self.current else 0

    def progress(self) -> bool:
        """Run every step that is ready now; return whether any ran."""
        moved = False
        while not self.done:
            if self.current is None:
                self.current = next(self.steps, None)
                if self.current is None:
                    self.done = True
                    for *_, record in self.parts:
                        if record.ended is None:
                            record.finish()
                    return True
            part, primitive = self.current
            if not primitive.ready():
                return moved
            name, algo, seq, record = self.parts[part]
            if record.state != "running":
                record.state, record.progress = "running", self._progress_text
            if self.tracer.enabled:
                t0 = time.time()
                primitive.run()
                self.tracer.step(
                    seq=seq, collective=name, algo=algo, step=self.step, primitive=primitive, t0=t0, t1=time.time()
                )
            else:  # no clock read for a trace nobody writes
                primitive.run()
            self.step += 1
            self.last = primitive
            self.current = None
            moved = True
        return moved

    def _progress_text(self) -> str:
        return f"{self.step} steps done, last {self.last.describe()}" if self.last else "no step done yet"

    def headline(self) -> str:
        name, algo, seq, _ = self.parts[self._part()]
        return f"{name} #{seq} ({algo})"

    def describe(self) -> str:
        now = self.current[1].describe() if self.current else "between steps"
        return f"{self.headline()} at step {self.step}: {now}"

    def waiting_for(self) -> str:
        return self.current[1].waiting_for() if self.current else "its next step"


def _labelled(steps: Iterator[Any], part: int, relabel: bool = False) -> Iterator[tuple[int, Step]]:
    for item in steps:
        if relabel:
            index, primitive = item
            yield part + index, primitive
        else:
            yield part, item
