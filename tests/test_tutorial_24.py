"""Tutorial 24 (long sequences) runs on numpy and checks itself: only ring attention with recomputation fits the
memory limit, the planner picks that layout, the ring's steps are drawn, and 4 ranks train exactly as one process
on the whole sequence."""

import pytest
from helpers import TUTORIALS, run_python

pytestmark = pytest.mark.mpi


def test_tutorial_24_fits_a_long_sequence_only_with_the_ring_and_recomputation(tmp_path):
    proc = run_python([str(TUTORIALS / "24_long_sequences.py"), "--out", str(tmp_path)], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("[rank 0]\nTutorial 24 on the 'numpy' backend, 4 ranks")
    assert out.count("over the limit") == 3 and out.count(" fits") == 2  # the measured table, then the planner
    assert "only cp > 1 with recomputation fits 1.5 MB per rank" in out
    assert out.count("(under it)") == 1 and "cp=4 recompute" in out.split("(under it)")[0].splitlines()[-1]
    assert "4 ranks, ring attention, recomputation" in out.split(" fits")[0].splitlines()[-1]
    # Every rank attends to half of each visiting block, and to its own block's lower triangle (with the diagonal).
    assert out.count("  50%") == 12 and out.count("  51%") == 4
    assert "every parameter equals one process's after 2 steps" in out
    assert (tmp_path / "ring_steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Done: the split model trains as one process does" in out
