"""Helpers shared by test files that run nbcoll's own scripts (tutorials, command lines) in a fresh process."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"


def run_python(args: list[str], backend: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python args...`` with ``NBCOLL_BACKEND=backend``, in a process whose simulator setting is its own."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = backend
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)
