"""Tutorial 17 (benchmarking like nccl-tests) runs on 4 ranks and prints the table with every check passing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parent.parent / "tutorials" / "17_benchmarking_like_nccl_tests.py"


@pytest.mark.mpi
def test_tutorial_17_times_converts_and_checks(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = "numpy"
    env["NBCOLL_FIGURES_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, str(TUTORIAL)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "busbw factor of all_reduce on 4 ranks: 1.500" in out
    assert "busbw factor of all_gather on 4 ranks: 0.750" in out
    assert out.count("#wrong = 0") == 4
    assert "rank 1: input [3, 0, 1, 2" in out
    assert "# Wrong elements       : 0 OK" in out and "# Avg bus bandwidth" in out
    assert f"busbw against size: {tmp_path / 'busbw_all_reduce.png'}" in out
    assert (tmp_path / "busbw_all_reduce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(f"5. {algo:>6}: measured" in out for algo in ("ring", "tree", "direct"))
    assert "Done: timed, converted to busbw and checked exactly" in out
