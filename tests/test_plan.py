"""The planner: which layouts it lists, the parts of its prediction, its ranking and explanation, its command."""

import subprocess
import sys

import pytest

from nbcoll.comm.tuner import LinkModel
from nbcoll.parallel.plan import Layout, ModelSpec, Rates, explain, format_plan, layouts, plan, predict

SPEC = ModelSpec(layers=4, hidden=64, seq_len=32, batch=16, heads=4, vocab=64)
RATES = Rates(flops_per_second=1e9, block_overhead=1e-3, link=LinkModel(alpha=50e-6, beta=1e9))


def test_layouts_cover_the_ranks_and_divide_the_model():
    found = layouts(ModelSpec(layers=6, hidden=48, seq_len=8, batch=12, heads=6, vocab=60), ranks=6)
    assert found and all(lay.dp * lay.tp * lay.pp == 6 for lay in found)
    assert {lay.tp for lay in found} <= {1, 2, 3, 6} and all(6 % lay.pp == 0 for lay in found)
    assert all(lay.chunks == 1 for lay in found if lay.pp == 1)
    assert all((12 // lay.dp) % lay.chunks == 0 for lay in found)
    assert Layout(1, 1, 6, 2) in found and Layout(6, 1, 1, 1) in found


def test_prediction_parts_follow_the_model():
    one = predict(SPEC, Layout(1, 1, 1, 1), RATES)
    assert one.parts["bubble"] == one.parts["tp comm"] == one.parts["pp comm"] == one.parts["dp comm"] == 0
    assert one.step_seconds == pytest.approx(one.parts["compute"])
    piped = predict(SPEC, Layout(1, 1, 4, 4), RATES)
    stage = (piped.parts["compute"] + piped.parts["pp comm"]) / 4  # one micro-batch on one stage
    assert piped.parts["bubble"] == pytest.approx(3 * stage)  # (p - 1) slots of the (m + p - 1)
    assert piped.memory_bytes < one.memory_bytes  # a quarter of the layers per rank
    split = predict(SPEC, Layout(1, 4, 1, 1), RATES)
    assert split.parts["tp comm"] > 0 and split.memory_bytes < one.memory_bytes
    assert predict(SPEC, Layout(4, 1, 1, 1), RATES).parts["dp comm"] > 0


def test_ranks_sharing_cores_pay_for_all_the_work_and_fill_the_bubble():
    shared = Rates(RATES.flops_per_second, RATES.block_overhead, RATES.link, cores=1)
    alone, crowded = predict(SPEC, Layout(4, 1, 1, 1), RATES), predict(SPEC, Layout(4, 1, 1, 1), shared)
    assert crowded.parts["sharing"] == pytest.approx(3 * alone.parts["compute"]) and alone.parts["sharing"] == 0
    piped = predict(SPEC, Layout(1, 1, 4, 1), shared)  # one micro-batch: the bubble is exactly the others' turns
    assert piped.parts["sharing"] == 0 and piped.parts["bubble"] >= 3 * piped.parts["compute"]


def test_plan_ranks_fastest_first_and_explains_the_winner():
    ranked = plan(SPEC, ranks=4, rates=RATES)
    times = [p.step_seconds for p in ranked]
    assert times == sorted(times)
    assert str(ranked[0].layout) in explain(ranked) and "wins" in explain(ranked)
    assert str(ranked[0].layout) in format_plan(ranked, top=3)
    tight = plan(SPEC, ranks=4, rates=RATES, memory_limit=sorted(p.memory_bytes for p in ranked)[2])
    assert len(tight) == 3
    with pytest.raises(ValueError, match="ranks"):
        plan(SPEC, ranks=0, rates=RATES)
    with pytest.raises(ValueError, match="no layout"):
        plan(SPEC, ranks=4, rates=RATES, memory_limit=1)


def test_plan_command_prints_the_ranking():
    run = [sys.executable, "-m", "nbcoll", "plan", "--ranks", "4", "--top", "3"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "dp=" in proc.stdout and "wins" in proc.stdout
    bad = subprocess.run(run[:4] + ["--heads", "3", "--ranks", "7"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no layout" in bad.stderr
