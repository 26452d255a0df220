"""Driving operations to completion without ever hanging silently.

:class:`Watchdog` runs a list of pending operations round robin: each, in turn, takes every step it can take
now, so that a rank in a ring that must both send and receive never blocks on its send while its receive could
have freed the peer. When nothing moves it polls, and every poll asks four questions:

1. was the communicator aborted, here or elsewhere (the control page's flag, or an abort message over MPI)?
2. has a peer on this machine died (its process is gone)?
3. has nothing moved for ``NBCOLL_TIMEOUT`` seconds?
4. if none of these, sleep a little (spinning first), and try again.

Each question has its own error: :class:`CommAbortedError`, :class:`CommPeerLostError`,
:class:`CommTimeoutError`, and every message names the operation, the rank, the peer, the step reached and what
the rank waited for, followed by the rank's flight recorder (:mod:`nbcoll.comm.watchdog_checks` asks them and
words the errors).

Example::

    watchdog.drive([SendOp(...), RecvOp(...)])      # returns when both are done, or raises
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from nbcoll.comm.debug import FlightRecorder, Logger
from nbcoll.comm.watchdog_checks import MPI_ERRORS, WatchdogChecks, process_alive  # noqa: F401  (as before)

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

TAG_ABORT = 77
"""Tag of the abort message, on the communicator's control MPI communicator (never on the data one)."""

HEALTH_CHECK_INTERVAL = 0.01
"""Seconds between two checks of abort messages and peer processes while waiting."""

SPIN_SECONDS = 0.002
"""How long a waiting rank only yields the core (``sched_yield``) before it starts to sleep."""

MAX_SLEEP_SECONDS = 0.001


class Watchdog(WatchdogChecks):
    """Progresses operations, bounded by a timeout, released by an abort, failed by a dead peer.

    ``aborted_by()`` returns the rank that aborted the communicator, or ``None``; ``peer_pids`` maps the
    peers whose process this rank can see (those on its machine) to their pid.
    """

    def __init__(
        self,
        rank: int,
        timeout: float,
        aborted_by: Callable[[], int | None],
        peer_pids: dict[int, int],
        recorder: FlightRecorder,
        log: Logger,
    ) -> None:
        self.rank = rank
        self.timeout = timeout
        self.aborted_by = aborted_by
        self.peer_pids = peer_pids
        self.recorder = recorder
        self.log = log
        self.failed = False  # an operation ended in an error: messages may still be on their way

    def _progress_pass(self, pending: Sequence[Any], tracing: bool = False) -> bool:
        """Give every pending operation its turn once; return whether any took a step."""
        moved = False
        busy: set[int] = set()
        for op in pending:
            if id(op.conn) in busy or op.done:
                continue  # an earlier message on this connection goes first
            busy.add(id(op.conn))
            try:
                took_a_step = op.progress()
            except MPI_ERRORS as exc:
                raise self._mpi_failure(op, pending, exc) from exc
            if took_a_step:
                moved = True
                if tracing:
                    self.log.trace("P2P", f"{op.headline()}: {op.record.progress}, connection step {op.conn.step}")
        return moved

    def drive(self, ops: Sequence[Any]) -> None:
        """Progress ``ops`` round robin until all are done; raise as soon as one can never finish.

        Operations on the same connection run in the order given, one after the other. An operation is any object
        with ``conn``, ``peer``, ``kind``, ``record`` (an :class:`~nbcoll.comm.debug.OperationRecord`), ``done``,
        ``progress() -> bool`` (took a step), ``headline()``, ``describe()`` and ``waiting_for()``: the
        collective primitives drive their own operations through this same loop.
        """
        try:
            pending = [op for op in ops if not op.done]
            last_move = time.monotonic()
            # The first check waits one interval: a small collective that finishes within it never pays for
            # reading the control page, probing for abort messages and reading every peer's /proc entry.
            next_health_check = last_move + HEALTH_CHECK_INTERVAL
            tracing = self.log.enabled("TRACE", "P2P")
            while pending:
                moved = self._progress_pass(pending, tracing)
                pending = [op for op in pending if not op.done]
                now = time.monotonic()
                if moved:
                    last_move = now
                    continue
                if now >= next_health_check:  # an abort or a dead peer is noticed within HEALTH_CHECK_INTERVAL
                    self.check_aborted(pending)
                    self.check_peers(pending, functools.partial(self._progress_pass, pending))
                    next_health_check = now + HEALTH_CHECK_INTERVAL
                if now - last_move > self.timeout:
                    raise self._timed_out(pending)
                self._wait_a_little(now - last_move)
        except BaseException:
            self.failed = True
            raise

    @staticmethod
    def _wait_a_little(waited: float) -> None:
        # Yield the core but stay hot while the peer is likely a step away; back off only after a while, so a
        # rank that waits long costs little CPU, and one that waits briefly wakes within microseconds.
        # (sched_yield, not sleep(0): a zero sleep still pays the kernel's timer slack, tens of microseconds.)
        if waited < SPIN_SECONDS:
            os.sched_yield()
        else:
            time.sleep(min(MAX_SLEEP_SECONDS, waited / 20))


def abort_message_source(ctrl_comm: Any) -> int | None:
    """The rank whose abort message has arrived on ``ctrl_comm``, or ``None``; the message is consumed."""
    if not ctrl_comm.Iprobe(MPI.ANY_SOURCE, TAG_ABORT):  # only communicators over MPI have abort messages
        return None
    status = MPI.Status()
    ctrl_comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_ABORT, status=status)
    ctrl_comm.Recv([bytearray(0), MPI.BYTE], source=status.Get_source(), tag=TAG_ABORT)
    return status.Get_source()
