"""Run a kernel exercise's check on the simulator, for a machine whose own backend is a real GPU.

The checks describe the simulator: it raises on an out-of-bounds index and names the thread, where a GPU may
silently write past the end. So on a GPU machine the kernel cases run in a child process started with
``NBCOLL_BACKEND=sim`` (:mod:`nbcoll.exercises.supervised`, which also gives each case a time limit)::

    report = run("map_kernel", "map_kernel.py", ptx=True)
"""

from __future__ import annotations

from pathlib import Path

from nbcoll.exercises import supervised
from nbcoll.exercises.report import Report


def run(name: str, path: str | Path, ptx: bool, timeout: float = supervised.CASE_SECONDS) -> Report:
    """The report of ``exercises.check(name, path, ptx)`` computed in a fresh process on the simulator."""
    return supervised.run(name, path, ptx, timeout=timeout)
