"""Run a kernel exercise's check in a process on the simulator, for a machine whose own backend is a real GPU.

The checks describe the simulator: it raises on an out-of-bounds index and names the thread, where a GPU may
silently write past the end. So on a GPU machine ``--check`` runs the kernel cases here, in a subprocess started
with ``NBCOLL_BACKEND=sim``, and reads the report back as JSON::

    report = run("map_kernel", "map_kernel.py", ptx=True)
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from nbcoll.exercises.report import Case, Report

TIMEOUT_SECONDS = 600.0


def run(name: str, path: str | Path, ptx: bool) -> Report:
    """The report of ``exercises.check(name, path, ptx)`` computed in a fresh process on the simulator."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = "sim"
    command = [sys.executable, "-m", "nbcoll.exercises.in_simulator", name, str(Path(path).resolve()), str(int(ptx))]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        report = Report(name)
        report.fail("simulator", "the check in the simulator process failed:\n" + proc.stderr.strip()[-2000:])
        return report
    data = json.loads(lines[-1])
    return Report(data["exercise"], [Case(**case) for case in data["cases"]], data["notes"])


def main(argv: list[str]) -> int:
    from nbcoll import exercises

    name, path, ptx = argv
    report = exercises.check(name, path, ptx=bool(int(ptx)))
    print(json.dumps(dataclasses.asdict(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
