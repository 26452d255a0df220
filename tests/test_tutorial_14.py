"""Tutorial 14 measures memory per rank for ZeRO stages 0 to 3 and every stage trains the same model."""

import re

import pytest
from helpers import TUTORIALS, run_python

pytestmark = pytest.mark.mpi


def test_tutorial_14_on_numpy(tmp_path):
    proc = run_python([str(TUTORIALS / "14_zero_and_fsdp.py"), "--out", str(tmp_path)], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    blocks = re.split(r"^\[rank (\d+)\]\n", proc.stdout, flags=re.MULTILINE)
    assert [int(r) for r in blocks[1::2]] == [0, 1, 2, 3], proc.stdout
    for rank, out in enumerate(blocks[2::2]):
        # 2633 parameters on 4 ranks: DDP exactly 16 B each; the stages above it within their shards' padding.
        assert "stage 0:   42128 B measured,   42128.0 B by the formula" in out, out
        ratios = [float(r) for r in re.findall(r"\(([0-9.]+) x: padding", out)]
        assert len(ratios) == 4 and all(1.0 <= r < 1.1 for r in ratios), out
        assert f"Done: rank {rank} ok" in out
    assert (tmp_path / "memory_per_rank.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
