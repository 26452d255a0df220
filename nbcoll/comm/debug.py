"""``NBCOLL_DEBUG`` logging and the flight recorder: what a rank did, readable after the fact.

Example::

    NBCOLL_DEBUG=INFO NBCOLL_DEBUG_SUBSYS=INIT,P2P mpiexec -n 2 python train.py
    # [nbcoll rank 0] INFO INIT  communicator of 2 ranks on 1 node: peer 1 via ipc
    # [nbcoll rank 0] INFO P2P   send #3 to peer 1: 4096 bytes, float32[1024]

The flight recorder keeps each rank's last ``NBCOLL_FLIGHT_RECORDER`` operations with their progress; a timeout
error prints it, so that the question "what was this rank doing when it stopped?" has an answer.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

LEVELS = {"WARN": 1, "INFO": 2, "TRACE": 3}


class Logger:
    """Rank-prefixed log lines, filtered by level and subsystem.

    Example::

        log = Logger(rank=0, level="INFO", subsystems={"P2P"})
        log.info("P2P", "send to peer 1")       # printed
        log.trace("P2P", "chunk 3 posted")      # not printed: TRACE is above INFO
    """

    def __init__(
        self, rank: int, level: str | None, subsystems: frozenset[str] | set[str], stream: TextIO | None = None
    ) -> None:
        self.rank = rank
        self.level = LEVELS.get(level or "", 0)
        self.subsystems = frozenset(subsystems)
        self.stream = stream

    def enabled(self, level: str, subsys: str) -> bool:
        return LEVELS[level] <= self.level and ("ALL" in self.subsystems or subsys in self.subsystems)

    def log(self, level: str, subsys: str, message: str) -> None:
        if self.enabled(level, subsys):
            stream = self.stream or sys.stderr
            print(f"[nbcoll rank {self.rank}] {level} {subsys:<5} {message}", file=stream, flush=True)

    def warn(self, subsys: str, message: str) -> None:
        self.log("WARN", subsys, message)

    def info(self, subsys: str, message: str) -> None:
        self.log("INFO", subsys, message)

    def trace(self, subsys: str, message: str) -> None:
        self.log("TRACE", subsys, message)


@dataclass(slots=True)  # made on every call: slots make it cheaper to build
class OperationRecord:
    """One operation in the flight recorder; the operation updates ``state`` and ``progress`` as it runs."""

    seq: int
    op: str
    peer: int
    nbytes: int
    what: str
    state: str = "queued"
    progress: str | Callable[[], str] = ""
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    def finish(self, state: str = "done") -> None:
        if callable(self.progress):  # its last text: a finished record keeps no operation (nor its buffers) alive
            self.progress = self.progress()
        self.state, self.ended = state, time.monotonic()

    def format(self, now: float) -> str:
        age = now - self.started
        took = f"took {self.ended - self.started:.3f}s" if self.ended is not None else "still running"
        text = self.progress() if callable(self.progress) else self.progress  # callables format only when asked
        progress = f", {text}" if text else ""
        return (
            f"#{self.seq:<4} {self.op} peer={self.peer} {self.nbytes} bytes ({self.what}): "
            f"{self.state}{progress}; started {age:.3f}s ago, {took}"
        )


class FlightRecorder:
    """The last ``capacity`` operations of one rank, oldest first.

    Example::

        recorder = FlightRecorder(capacity=4)
        entry = recorder.record("send", peer=1, nbytes=64, what="float32[16]")
        entry.finish()
        print(recorder.format())
    """

    def __init__(self, capacity: int = 32) -> None:
        self.entries: deque[OperationRecord] = deque(maxlen=capacity)
        self.count = 0

    def record(self, op: str, peer: int, nbytes: int, what: str) -> OperationRecord:
        self.count += 1
        entry = OperationRecord(self.count, op, peer, nbytes, what)
        self.entries.append(entry)
        return entry

    def format(self, rank: int | None = None) -> str:
        now = time.monotonic()
        who = f"rank {rank}'s" if rank is not None else "the"
        lines = [f"flight recorder: {who} last {len(self.entries)} of {self.count} operations, oldest first:"]
        lines += ["  " + entry.format(now) for entry in self.entries]
        return "\n".join(lines)
