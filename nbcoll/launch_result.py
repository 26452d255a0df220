"""What a launch of N ranks produced (:func:`nbcoll.launch.launch`): each rank's output and exit status, and
``mpiexec``'s own messages, with the reports a failed run prints.

Example::

    result = launch(2, code="print('hello')")
    result.check()                  # raises LaunchError, showing every rank's output, if a rank failed
    print(result.in_rank_order())   # [rank 0] hello [rank 1] hello
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any


class LaunchError(RuntimeError):
    """A launched job failed or timed out; the message shows every rank's output."""


@dataclass
class RankResult:
    """What a multi-rank run produced: each rank's output and exit status, and ``mpiexec``'s own messages.

    Example::

        result = launch(2, code="print('hello')")
        assert result.ok and result.outputs == ["hello\\n", "hello\\n"]
        print(result.report())      # every rank's output, labelled, with the command
    """

    nprocs: int
    command: list[str]
    """The plain ``mpiexec -n N python script args...`` that reproduces the run (its wrapper left out)."""
    returncode: int | None
    """``mpiexec``'s exit status; ``None`` when it was killed at the timeout."""
    outputs: list[str]
    """Index ``r``: everything rank ``r`` wrote to stdout and stderr, in the order it wrote it."""
    statuses: list[int | None]
    """Index ``r``: rank ``r``'s exit status, or ``None`` when it never finished (killed, crashed, hung)."""
    launcher_output: str = ""
    launcher_command: list[str] = field(default_factory=list)
    """What really ran: each rank goes through this module's wrapper, which collects its output."""
    timed_out: bool = False
    timeout: float | None = None
    elapsed: float = 0.0
    returns: list[Any] = field(default_factory=list)
    """For a launched function, index ``r``: the value rank ``r`` returned (``None`` if it did not finish)."""
    pids: list[int | None] = field(default_factory=list)
    """Index ``r``: rank ``r``'s process id (``None`` if it never started): its ``/dev/shm`` names hold it."""

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0 and all(s == 0 for s in self.statuses)

    def describe_status(self) -> str:
        if self.timed_out:
            return f"timed out after {self.timeout:g} s; every process of the job was killed"
        return f"mpiexec exit status {self.returncode}, after {self.elapsed:.1f} s"

    def report(self) -> str:
        """Every rank's output under a header naming the rank and its status, then ``mpiexec``'s messages."""
        lines = [f"command: {shlex.join(self.command)}", f"{self.nprocs} rank(s): {self.describe_status()}"]
        for rank, (output, status) in enumerate(zip(self.outputs, self.statuses, strict=True)):
            state = f"exit status {status}" if status is not None else "did not finish"
            lines.append(f"----- rank {rank} ({state}) -----")
            lines.append(output.rstrip("\n") if output else "(no output)")
        if self.launcher_output.strip():
            lines.append("----- mpiexec -----")
            lines.append(self.launcher_output.rstrip("\n"))
        return "\n".join(lines)

    def check(self) -> RankResult:
        """Return ``self`` when every rank succeeded; otherwise raise :class:`LaunchError` with :meth:`report`."""
        if not self.ok:
            raise LaunchError(self.report())
        return self

    def in_rank_order(self) -> str:
        """Each rank's output as one block headed by ``[rank r]``, ranks in order: what
        :func:`~nbcoll.launch.relaunch` prints.

        A rank that printed nothing says so, and how it ended, rather than leaving a bare heading: a tutorial
        often narrates on rank 0 alone while the other ranks run the same script silently.
        """
        blocks = []
        for rank, output in enumerate(self.outputs):
            output = output or f"(printed nothing: it ran the same script silently and {self._ending(rank)})\n"
            blocks.append(f"[rank {rank}]\n{output}" + ("" if output.endswith("\n") else "\n"))
        return "".join(blocks)

    def _ending(self, rank: int) -> str:
        status = self.statuses[rank] if rank < len(self.statuses) else None
        return "did not finish" if status is None else f"exited with status {status}"
