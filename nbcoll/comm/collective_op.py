"""One rank's part of a collective, run step by step by the communicator's progress loop.

An algorithm is a generator of primitives (:mod:`nbcoll.comm.algorithms`). :class:`CollectiveOp` pulls the next
primitive when the previous one has run, and runs it as soon as its peers are ready. It has the interface of a
point-to-point operation (:mod:`nbcoll.comm.p2p`), so the same watchdog drives it: the same timeout, abort and
dead-peer checks, and the same flight recorder.

A collective split across channels has one generator per channel. The loop takes the channels in turn and runs
each one's next step when it is ready, so their steps interleave: one channel moves while another waits for a
peer, in one loop on one thread, as NCCL's channels do on separate thread blocks of one kernel.

Several collectives issued in one ``comm.group()`` are fused into one operation that runs them in the order
they were issued, one after the other (the channels of one at a time): every rank then uses each connection in
the same order, which is what makes the fusion safe.

Example::

    op = CollectiveOp("all_reduce", "ring", [ring.all_reduce(ctx, x, x)], record, tracer, seq=1)
    comm.drive([op])
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from nbcoll.comm.debug import OperationRecord
from nbcoll.comm.primitives import Step
from nbcoll.comm.trace import Tracer


class CollectiveOp:
    """Runs the primitives of one or more collectives, in order, each when it is ready; a collective's channels
    interleave."""

    kind = "collective"

    def __init__(
        self,
        name: str,
        algo: str,
        channels: Sequence[Iterator[Step]],
        record: OperationRecord,
        tracer: Tracer,
        seq: int,
    ) -> None:
        self.parts = [(name, algo, seq, record)]
        self.plans: list[list[Iterator[Step]]] = [list(channels)]  # per part, each channel's steps
        self.tracer = tracer
        self.part = 0  # the collective running now
        self.channels = self.plans[0]
        self.current: list[Step | None] = [None] * len(self.channels)  # each channel's next step
        self.running = list(range(len(self.channels)))  # channels with steps left
        self.last: Step | None = None
        self.step = 0  # steps run so far, for the watchdog's messages
        self.done = False
        self.replayable: list[Step] | None = None  # the steps, when the engine may run them again (a replay)

    @property
    def conn(self) -> CollectiveOp:
        # The watchdog keeps operations on one connection in order; a collective orders its own steps.
        return self

    @property
    def record(self) -> OperationRecord:
        return self.parts[self.part][3]

    @property
    def seqs(self) -> list[int]:
        """The call numbers of the collectives in this operation, in issue order."""
        return [seq for _, _, seq, _ in self.parts]

    def _waiting(self) -> list[tuple[int, Step]]:
        """(channel, step) of every channel whose next step is known and not yet run."""
        return [(c, self.current[c]) for c in self.running if self.current[c] is not None]

    @property
    def peer(self) -> int:
        peers = [p for _, step in self._waiting() for p in step.peers]
        return peers[0] if peers else -1

    def waiting_peers(self) -> list[int]:
        """Every peer the current steps wait for (a direct step waits for all of them, a tree root for two)."""
        return list(dict.fromkeys(p for _, step in self._waiting() for p in step.waiting_peers()))

    def fuse(self, other: CollectiveOp) -> None:
        """Append ``other``'s collectives after this operation's (a group of collectives)."""
        self.parts += other.parts
        self.plans += other.plans

    def progress(self) -> bool:
        """Run every step that is ready now, the channels in turn; return whether any ran."""
        moved = False
        while not self.done:
            if not self.running:  # this collective is done: the next one of the group, or the end
                if self.part + 1 < len(self.parts):
                    self._start(self.part + 1)
                    continue
                self.done = True
                for *_, record in self.parts:
                    if record.ended is None:
                        record.finish()
                return True
            ran = False
            for channel in self.running[:]:
                primitive = self.current[channel]
                if primitive is None:
                    primitive = self.current[channel] = next(self.channels[channel], None)
                    if primitive is None:
                        self.running.remove(channel)
                        ran = True
                        continue
                if not primitive.ready():
                    continue
                name, algo, seq, record = self.parts[self.part]
                if record.state != "running":
                    record.state, record.progress = "running", self._progress_text
                if self.tracer.enabled:
                    t0 = time.time()
                    primitive.run()
                    self.tracer.step(
                        seq=seq,
                        collective=name,
                        algo=algo,
                        step=self.step,
                        primitive=primitive,
                        t0=t0,
                        t1=time.time(),
                        channel=channel,
                    )
                else:  # no clock read for a trace nobody writes
                    primitive.run()
                self.step += 1
                self.last = primitive
                self.current[channel] = None
                ran = moved = True
            if not ran:
                return moved
        return moved

    def _start(self, part: int) -> None:
        self.part = part
        self.channels = self.plans[part]
        self.current = [None] * len(self.channels)
        self.running = list(range(len(self.channels)))

    def _progress_text(self) -> str:
        return f"{self.step} steps done, last {self.last.describe()}" if self.last else "no step done yet"

    def headline(self) -> str:
        name, algo, seq, _ = self.parts[self.part]
        return f"{name} #{seq} ({algo})"

    def _per_channel(self, say: Any) -> str:
        waiting = self._waiting()
        if not waiting:
            return ""
        if len(self.channels) == 1:
            return say(waiting[0][1])
        return "; ".join(f"channel {c}: {say(step)}" for c, step in waiting)

    def describe(self) -> str:
        now = self._per_channel(lambda step: step.describe()) or "between steps"
        return f"{self.headline()} at step {self.step}: {now}"

    def waiting_for(self) -> str:
        return self._per_channel(lambda step: step.waiting_for()) or "its next step"
