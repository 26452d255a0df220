"""Tutorial 13 (data parallelism) runs on 4 ranks and every rank matches one process's gradients."""

import re

import pytest
from helpers import TUTORIALS, run_python

pytestmark = pytest.mark.mpi


def test_tutorial_13_on_numpy():
    proc = run_python([str(TUTORIALS / "13_data_parallel.py")], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    blocks = re.split(r"^\[rank (\d+)\]\n", proc.stdout, flags=re.MULTILINE)
    assert [int(r) for r in blocks[1::2]] == [0, 1, 2, 3], proc.stdout
    for rank, out in enumerate(blocks[2::2]):
        for difference in re.findall(r"largest difference (?:from one process: )?([0-9.e+-]+)", out):
            assert float(difference) < 1e-12, (rank, out)
        assert "6 bucket(s) of [1, 1, 1, 1, 1, 1] parameters, 6 all-reduce(s)" in out
        assert "5 of 6 all-reduces started before backward's last gradient" in out
        assert f"Done: rank {rank} ok" in out
    assert "the weight's gradient on rank 0 equals one process's" in blocks[2]
