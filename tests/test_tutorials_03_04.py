"""Tutorials 03 (reductions) and 04 (tiled matmul) run, print their counts, and their kernels compile to PTX."""

from pathlib import Path

import pytest
from helpers import compile_tutorial_kernels, run_python

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
REDUCTIONS = TUTORIALS / "03_reductions.py"
TILED_MATMUL = TUTORIALS / "04_tiled_matmul.py"


@pytest.fixture(scope="module")
def reductions_output() -> str:
    proc = run_python([str(REDUCTIONS)], "sim")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def matmul_output() -> str:
    proc = run_python([str(TILED_MATMUL)], "sim")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_tutorial_03_narrates_each_section(reductions_output):
    assert reductions_output.startswith("Tutorial 03 on the 'sim' backend: summing 1000 float32 values")
    for section in range(1, 5):
        assert f"\n{section}. " in reductions_output
    assert reductions_output.rstrip().endswith("Done: every reduction matched NumPy.")


def test_tutorial_03_counts_atomics_and_writes(reductions_output):
    lines = [line.split() for line in reductions_output.splitlines() if "ms on the host clock" in line]
    counts = [(int(row[6]), int(row[8])) for row in lines]  # (atomics, global writes) of each version
    assert counts == [(1000, 1000), (8, 8), (2, 2), (0, 1)]
    assert "[16.0, 20.0]" in reductions_output  # the printed tree on 1..8
    assert "8 atomics instead of 1000: 125x fewer" in reductions_output
    # The simulator's times put the tree behind the naive kernel: the output says why, and what a GPU does instead.
    assert "simulator times measure Python threads" in reductions_output
    assert "on a GPU the one-address atomics of the naive version are what makes it the slowest" in reductions_output


def test_tutorial_04_counts_match_the_formulas(matmul_output):
    assert matmul_output.startswith("Tutorial 04 on the 'sim' backend: (20 x 40) @ (40 x 24)")
    assert "global loads: counted 38400, formula 2*M*N*K = 38400" in matmul_output
    assert "global loads: counted 3520, formula M*K*ceil(N/TILE) + K*N*ceil(M/TILE) = 3520" in matmul_output
    assert "shared memory per block: 2 tiles x 16 x 16 x 4 bytes = 2048 bytes" in matmul_output
    assert "simulator times measure Python threads and their syncthreads barriers, not memory traffic" in matmul_output
    table = matmul_output.split("naive traffic   tiled traffic", 1)[1].splitlines()
    rows = {int(row[0]): row for row in (line.split() for line in table) if len(row) == 8}
    assert rows[1024][1:4] == ["2147483648", "134217728", "16.0"]
    assert matmul_output.rstrip().endswith("Done: every kernel matched NumPy and every count matched its formula.")


@pytest.mark.parametrize("tutorial, kernels", [(REDUCTIONS, 3), (TILED_MATMUL, 2)], ids=["03", "04"])
def test_tutorial_kernels_compile_to_ptx_for_sm90(tutorial, kernels):
    proc = compile_tutorial_kernels(tutorial)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"compiled {kernels}" in proc.stdout, proc.stdout
