"""The questions the watchdog asks while nothing moves, and the errors it raises when one answer is bad.

:class:`WatchdogChecks` is the half of :class:`~nbcoll.comm.watchdog.Watchdog` that is not its loop: whether the
communicator was aborted (:class:`CommAbortedError`), whether a peer's process has died
(:class:`CommPeerLostError`, also when MPI reports a broken connection), and the message of a wait that made no
progress for ``NBCOLL_TIMEOUT`` (:class:`CommTimeoutError`). Every message names the operation, the rank, the
peer, the step reached and what the rank waited for, followed by the rank's flight recorder.

Example::

    watchdog.check_aborted(pending)      # raises CommAbortedError if any rank aborted the communicator
    watchdog.check_peers(pending)        # raises CommPeerLostError if a peer it waits for has exited
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from nbcoll.comm.errors import CommAbortedError, CommPeerLostError, CommTimeoutError
from nbcoll.ipc_memory import unlink_names_of

try:
    from mpi4py import MPI

    MPI_ERRORS: tuple[type[BaseException], ...] = (MPI.Exception,)
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI_ERRORS = ()


def process_alive(pid: int) -> bool:
    """True unless process ``pid`` has exited (a zombie waiting to be reaped counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


class WatchdogChecks:
    """Abort, dead-peer and timeout checks of a :class:`~nbcoll.comm.watchdog.Watchdog`, which sets ``rank``,
    ``timeout``, ``aborted_by``, ``peer_pids``, ``recorder`` and ``log``.

    >>> from nbcoll.comm.watchdog import Watchdog
    >>> issubclass(Watchdog, WatchdogChecks)
    True
    """

    rank: int
    timeout: float
    aborted_by: Callable[[], int | None]
    peer_pids: dict[int, int]
    recorder: Any
    log: Any

    def _report(self, error: Exception) -> Exception:
        self.log.warn("P2P", f"{type(error).__name__}: {str(error).splitlines()[0]}")
        return error

    def _context(self, ops: Sequence[Any]) -> str:
        lines = [f"  pending: {op.describe()}; waiting for {op.waiting_for()}" for op in ops]
        return "\n".join(lines) + "\n" + self.recorder.format(self.rank)

    def check_aborted(self, ops: Sequence[Any] = ()) -> None:
        by = self.aborted_by()
        if by is None:
            return
        for op in ops:
            op.record.finish("aborted")
        who = "this rank" if by == self.rank else f"rank {by}"
        what = f"{ops[0].headline()} stopped" if ops else "operation refused"
        raise self._report(
            CommAbortedError(
                f"rank {self.rank}: {what}: the communicator was aborted by {who}; every operation on it fails"
                + (":\n" + self._context(ops) if ops else "")
            )
        )

    def check_peers(self, ops: Sequence[Any], still_moving: Callable[[], bool] = lambda: False) -> None:
        """Raise if a peer an operation waits for has exited (every peer of its step, not only the first) and
        nothing can move any more.

        A peer that wrote its last chunk and then left is not lost: what it wrote is still there to read, so
        ``still_moving()`` (one more progress pass) is asked before the error is raised.
        """
        for op in ops:
            waiting = op.waiting_peers() if hasattr(op, "waiting_peers") else [op.peer]
            for peer in waiting:
                pid = self.peer_pids.get(peer)
                if pid is not None and not process_alive(pid):
                    unlink_names_of(pid)  # what it had not unlinked yet (a window it was setting up)
                    if still_moving():
                        return
                    op.record.finish("failed")
                    raise self._report(
                        CommPeerLostError(
                            f"rank {self.rank}: {op.headline()} failed: peer rank {peer} (pid {pid}) has exited "
                            f"during {op.describe()}:\n" + self._context(ops)
                        )
                    )

    def check_peer_processes(self, what: str) -> None:
        """Raise if any peer on this machine has exited (for waits that are not operations: split, dup)."""
        for peer, pid in sorted(self.peer_pids.items()):
            if not process_alive(pid):
                unlink_names_of(pid)
                raise self._report(
                    CommPeerLostError(f"rank {self.rank}: {what} failed: peer rank {peer} (pid {pid}) has exited")
                )

    def _mpi_failure(self, op: Any, pending: Sequence[Any], exc: BaseException) -> Exception:
        """MPI's own report of a broken connection, usually a dead peer, as a :class:`CommPeerLostError`."""
        op.record.finish("failed")
        reason = [line.strip() for line in str(exc).splitlines() if line.strip()][-1]
        return self._report(
            CommPeerLostError(
                f"rank {self.rank}: {op.headline()} failed: MPI reported an error on the connection with peer "
                f"rank {op.peer}, most often because that peer has exited ({reason}), during {op.describe()}:\n"
                + self._context(pending)
            )
        )

    def _timed_out(self, pending: Sequence[Any]) -> Exception:
        for op in pending:
            op.record.finish("timed out")
        first = pending[0]
        return self._report(
            CommTimeoutError(
                f"rank {self.rank}: {first.headline()} made no progress for {self.timeout:g} s "
                f"(NBCOLL_TIMEOUT) at connection step {first.conn.step}, waiting for {first.waiting_for()}:\n"
                + self._context(pending)
            )
        )
