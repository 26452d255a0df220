"""Tutorial 13 (data parallelism) runs on 4 ranks and every rank matches one process's gradients."""

import re

import pytest
from helpers import TUTORIALS, run_python

pytestmark = pytest.mark.mpi


def test_tutorial_13_on_numpy(tmp_path):
    proc = run_python([str(TUTORIALS / "13_data_parallel.py"), "--out", str(tmp_path)], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    blocks = re.split(r"^\[rank (\d+)\]\n", proc.stdout, flags=re.MULTILINE)
    assert [int(r) for r in blocks[1::2]] == [0, 1, 2, 3], proc.stdout
    narration, others = blocks[2], blocks[4::2]
    # Rank 0 prints every step with every rank's numbers gathered into its lines; the others one line each.
    differences = re.findall(r"(?:largest difference|rank \d:) (?:from one process:? )?([0-9.]+e[+-]\d+)", proc.stdout)
    assert len(differences) >= 4 + 3 + 4 and all(float(d) < 1e-12 for d in differences), differences
    assert re.search(r"rank 0: \S+  rank 1: \S+  rank 2: \S+  rank 3: \S+\n", narration), narration
    assert "6 bucket(s) of [1, 1, 1, 1, 1, 1] parameters, 6 all-reduce(s)" in narration
    assert "5 of 6 all-reduces started before backward's last gradient" in narration
    assert "g  a parameter's gradient is accumulated" in narration and "S  synchronize" in narration
    for r in range(4):
        assert re.search(rf"rank {r}: [gLdS]+ +5 of 6 started before its last gradient", narration), narration
    assert (
        narration.count("bucket_cap_mb=") == 3 and "the weight's gradient on rank 0 equals one process's" in narration
    )
    assert f"5. the picture: {tmp_path / 'bucket_timeline.png'}" in narration
    assert (tmp_path / "bucket_timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Done: rank 0 ok" in narration
    for rank, out in enumerate(others, start=1):
        assert out.startswith(f"Done: rank {rank} ok: it ran the same steps as rank 0") and out.count("\n") == 1, out
