"""The helper every multi-rank test uses: run a script on N ranks and fail loudly, with every rank's output.

Example::

    from nbcoll.testing import run_ranks

    def test_all_reduce(nprocs):                       # nprocs parametrized over 1, 2, 3, 4 by the test file
        result = run_ranks(nprocs, "tests/mpi_scripts/all_reduce.py", "--count", "17")
        assert "ok" in result.outputs[0]

    run_ranks(2, code="from mpi4py import MPI; print(MPI.COMM_WORLD.rank)")

A failing or hanging rank raises ``AssertionError`` whose message holds the command and every rank's output,
labelled by rank, so a failure seen in CI can be read without re-running it. This module does not import pytest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from nbcoll.launch import RankResult, launch

__all__ = ["RankResult", "run_ranks"]

DEFAULT_TIMEOUT = 120.0


def run_ranks(
    nprocs: int,
    script: str | os.PathLike[str] | None = None,
    *args: Any,
    code: str | None = None,
    function: str | Callable[..., Any] | None = None,
    env: Mapping[str, str | None] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> RankResult:
    """``mpiexec -n nprocs python script args...`` (or ``python -c code``, or a function); raise if any rank fails.

    Returns the :class:`~nbcoll.launch_result.RankResult` (``result.outputs[r]`` is rank ``r``'s stdout and stderr).
    A non-zero exit of any rank, or the ``timeout`` (every process of the job is then killed), raises
    ``AssertionError`` with the full report. ``env`` adds to the inherited environment (``None`` removes).
    """
    result = launch(nprocs, script, code=code, function=function, args=args, env=env, timeout=timeout)
    if not result.ok:
        raise AssertionError(f"multi-rank run failed\n{result.report()}")
    return result
