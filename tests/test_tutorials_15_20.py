"""Tutorials 15 (tensor parallel), 16 (pipeline), 19 (experts) and 20 (planning) run on numpy and check themselves;
tutorial 19 also runs at its toy sizes on the simulator (the others choose toy sizes there the same way)."""

import pytest
from helpers import TUTORIALS, run_python

pytestmark = pytest.mark.mpi


def test_tutorial_15_splits_layers_and_trains_like_one_process():
    proc = run_python([str(TUTORIALS / "15_tensor_parallel.py")], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.startswith("[rank 0]\nTutorial 15 on the 'numpy' backend, 2 ranks")
    assert "Done: the split layers compute the full layers' results" in proc.stdout
    assert "f: forward the identity" in proc.stdout and "g: forward an all-reduce" in proc.stdout
    assert "|  rank 1  |  rows 8:16" in proc.stdout  # the drawing of the split
    assert proc.stdout.rstrip().split("\n[rank 1]\n")[1].startswith("rank 1: ran every step beside rank 0")


def test_tutorial_16_draws_both_timelines_with_the_expected_bubble(tmp_path):
    proc = run_python([str(TUTORIALS / "16_pipeline_parallel.py"), "--out", str(tmp_path)], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.count("bubble counted from the timeline 0.2727; (p-1)/(m+p-1) = 0.2727") == 2
    assert "micro-batches in flight per stage: [4, 3, 2, 1]" in proc.stdout
    for name in ("gpipe.png", "1f1b.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tutorial_19_moves_tokens_and_counts_drops():
    proc = run_python([str(TUTORIALS / "19_experts_and_all_to_all.py")], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "capacity factor 0.5: capacity 3" in proc.stdout
    assert "Done: experts on different ranks" in proc.stdout


def test_tutorial_19_runs_at_toy_sizes_on_the_simulator():
    proc = run_python([str(TUTORIALS / "19_experts_and_all_to_all.py")], "sim", timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.startswith("[rank 0]\nTutorial 19 on the 'sim' backend, 2 ranks, 2 experts (1 per rank)")
    assert "capacity factor 0.5: capacity 3" in proc.stdout
    assert "Done: experts on different ranks" in proc.stdout


def test_tutorial_20_plans_measures_and_trains_a_hybrid():
    proc = run_python([str(TUTORIALS / "20_planning_a_training_run.py")], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.count("predicted") >= 4 and "median error" in proc.stdout
    for term in ("embedding (first stage)", "norm, head, loss (last stage)", "optimizer update", "a collective call"):
        assert term in proc.stdout  # every cost the planner reads, timed on the ranks
    assert "an all-reduce after a block" in proc.stdout
    assert "3. A hybrid run on the 3-D mesh" in proc.stdout and proc.stdout.count("wins") == 2
    assert "2 x 2 x 2 needs 8 ranks" in proc.stdout
