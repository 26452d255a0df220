"""The planner: which layouts it lists, the parts of its prediction, its ranking and explanation, its command."""

import dataclasses
import subprocess
import sys

import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.tuner import LinkModel
from nbcoll.parallel.plan import (
    Layout,
    ModelSpec,
    Rates,
    explain,
    format_plan,
    layouts,
    measure_costs,
    measure_rates,
    plan,
    predict,
    stage_seconds,
    token_range,
)

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
    stages = [sum(stage_seconds(SPEC, Layout(1, 1, 4, 4), s, RATES)) for s in range(4)]
    assert stages[3] > stages[0] == stages[1] == stages[2]  # the last stage also runs the head
    assert piped.parts["compute"] + piped.parts["pp comm"] == pytest.approx(4 * stages[3])  # it paces the 4
    assert piped.parts["bubble"] == pytest.approx(sum(stages[:3]))  # the others' turns while filling and draining
    assert piped.memory_bytes < one.memory_bytes  # a quarter of the layers per rank
    split = predict(SPEC, Layout(1, 4, 1, 1), RATES)
    assert split.parts["tp comm"] > 0 and split.memory_bytes < one.memory_bytes
    assert predict(SPEC, Layout(4, 1, 1, 1), RATES).parts["dp comm"] > 0


def test_ranks_sharing_cores_pay_for_all_the_work_and_fill_the_bubble():
    shared = Rates(RATES.flops_per_second, RATES.block_overhead, RATES.link, cores=1)
    alone, crowded = predict(SPEC, Layout(4, 1, 1, 1), RATES), predict(SPEC, Layout(4, 1, 1, 1), shared)
    assert crowded.parts["sharing"] == pytest.approx(3 * alone.parts["compute"]) and alone.parts["sharing"] == 0
    piped = predict(SPEC, Layout(1, 1, 4, 1), shared)  # one micro-batch: the bubble is exactly the others' turns
    work = sum(stage_seconds(SPEC, Layout(1, 1, 4, 1), s, shared)[0] for s in range(4))
    assert piped.parts["sharing"] == 0 and piped.parts["compute"] + piped.parts["bubble"] >= work


def test_fixed_costs_land_on_their_stage_and_the_update_once_per_step():
    layout = Layout(1, 1, 2, 4)
    costs = dataclasses.replace(RATES, embed_overhead=1e-3, head_overhead=2e-3, update_overhead=5e-4)
    before = [stage_seconds(SPEC, layout, s, RATES)[0] for s in range(2)]
    after = [stage_seconds(SPEC, layout, s, costs)[0] for s in range(2)]
    assert after[0] - before[0] == pytest.approx(1e-3) and after[1] - before[1] == pytest.approx(2e-3)
    gap = predict(SPEC, layout, costs).parts["compute"] - predict(SPEC, layout, RATES).parts["compute"]
    assert gap == pytest.approx(4 * 2e-3 + 2 * 5e-4)  # the head per micro-batch, the update per block, once
    tp_calls = (
        stage_seconds(SPEC, Layout(1, 2, 1, 1), 0, RATES)[1] / stage_seconds(SPEC, Layout(1, 2, 4, 1), 1, RATES)[1]
    )
    assert tp_calls == pytest.approx((4 * 4 + 1 + 4) / 4)  # blocks, embedding and head + loss against one block


@pytest.fixture
def numpy_backend():
    """Timing a block is tested on numpy: on the simulator one block's forward takes seconds."""
    with nbcoll.use_backend("numpy"):
        yield


def test_rates_are_timed_at_the_sizes_the_layouts_use(numpy_backend):
    tiny = ModelSpec(layers=2, hidden=8, seq_len=4, batch=4, heads=2, vocab=8, bytes_per_value=8)
    assert token_range(tiny, 2) == (4, 16)  # pp=2 with 4 micro-batches: one sequence; tp=2: the whole batch
    rates = measure_rates(tiny, repeats=1, tokens=token_range(tiny, 2))
    assert rates.flops_per_second > 0 and rates.block_overhead >= 0 and rates.update_overhead > 0


def test_costs_are_timed_on_every_rank_and_rank_0s_returned(numpy_backend):
    tiny = ModelSpec(layers=2, hidden=8, seq_len=4, batch=4, heads=2, vocab=8, bytes_per_value=8)
    given = dataclasses.replace(RATES, embed_overhead=1e-3)

    def both(comm):
        timed = measure_costs(tiny, comm, cores=1, busy=0.0)
        return timed, measure_costs(tiny, comm, busy=0.0, compute=given, partner_wait=False)

    (timed, fixed), (timed_1, fixed_1) = loopback.run(2, both, config=CommConfig(timeout=120))
    assert timed == timed_1 and fixed == fixed_1  # every rank predicts alike
    assert timed.cores == 1 and timed.partner_wait >= 0
    assert min(timed.flops_per_second, timed.update_overhead, timed.call_latency) > 0
    assert fixed.flops_per_second == given.flops_per_second and fixed.embed_overhead == 1e-3
    assert fixed.call_latency > 0 and fixed.partner_wait == 0
    with pytest.raises(ValueError, match="busy"):
        loopback.run(1, lambda comm: measure_costs(tiny, comm, busy=-1.0))


@pytest.mark.simulator
def test_on_the_simulator_costs_time_the_calls_with_the_compute_given():
    """As tutorial 20 does on ``sim``: the compute rates are given, the calls' fixed cost is timed there."""
    tiny = ModelSpec(layers=2, hidden=8, seq_len=4, batch=4, heads=2, vocab=8, bytes_per_value=8)
    with nbcoll.use_backend("sim"):
        fixed = loopback.run(
            2, lambda comm: measure_costs(tiny, comm, busy=0.0, compute=RATES, partner_wait=False), config=CommConfig()
        )
    assert fixed[0] == fixed[1] and fixed[0].call_latency > 0 and fixed[0].partner_wait == 0
    assert fixed[0].flops_per_second == RATES.flops_per_second


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
    bad = subprocess.run(
        run[:4] + ["--heads", "3", "--hidden", "48", "--ranks", "7"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "no layout" in bad.stderr
    waits = subprocess.run(
        run + ["--call-latency", "1", "--partner-wait", "2"], capture_output=True, text=True, timeout=120
    )
    assert waits.returncode == 0 and "call 1.00 ms, partner wait 2.00 ms" in waits.stdout
    helped = subprocess.run(run[:4] + ["--help"], capture_output=True, text=True, timeout=120)
    for term in ("compute", "bubble", "tp comm", "pp comm", "dp comm", "sharing", "head and the loss", "measure_costs"):
        assert term in helped.stdout


BAD_PLAN_ARGUMENTS = {
    ("--hidden", "0"): "argument --hidden: expected an integer >= 1, got '0'",
    ("--layers", "0"): "argument --layers: expected an integer >= 1, got '0'",
    ("--seq", "-1"): "argument --seq: expected an integer >= 1",
    ("--batch", "0"): "argument --batch: expected an integer >= 1",
    ("--heads", "0"): "argument --heads: expected an integer >= 1",
    ("--vocab", "0"): "argument --vocab: expected an integer >= 1",
    ("--ranks", "0"): "argument --ranks: expected an integer >= 1",
    ("--top", "0"): "argument --top: expected an integer >= 1",
    ("--cores", "0"): "argument --cores: expected an integer >= 1",
    ("--call-latency", "-1"): "argument --call-latency: expected milliseconds >= 0, got '-1'",
    ("--partner-wait", "-0.5"): "argument --partner-wait: expected milliseconds >= 0",
    ("--call-latency", "nan"): "argument --call-latency: expected milliseconds >= 0, got 'nan'",
    ("--heads", "3", "--hidden", "64"): "argument --hidden: expected a multiple of --heads (3), got 64",
}


@pytest.mark.parametrize("bad", BAD_PLAN_ARGUMENTS, ids=" ".join)
@pytest.mark.parametrize("measure", [False, True], ids=["model", "measure"])
def test_plan_command_refuses_bad_arguments_before_any_work(bad, measure, capsys, monkeypatch):
    from nbcoll.__main__ import main
    from nbcoll.parallel import plan as planner

    def no_work(*args, **kwargs):
        raise AssertionError("the plan ran with a bad argument")

    monkeypatch.setattr(planner, "measure_rates", no_work)
    monkeypatch.setattr(planner, "plan", no_work)
    try:
        status = main(["plan", *bad, *(["--measure"] if measure else [])])
    except SystemExit as stopped:  # argparse's own exit
        status = stopped.code
    assert status == 2
    err = capsys.readouterr().err
    assert "nbcoll plan: error: " + BAD_PLAN_ARGUMENTS[bad] in err, err


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hidden", 0, "ModelSpec(hidden): expected an integer >= 1, got 0"),
        ("layers", 0, "ModelSpec(layers): expected an integer >= 1, got 0"),
        ("seq_len", -1, "ModelSpec(seq_len)"),
        ("batch", 0, "ModelSpec(batch)"),
        ("heads", 0, "ModelSpec(heads)"),
        ("vocab", 0, "ModelSpec(vocab)"),
        ("heads", 3, "ModelSpec(hidden): expected a multiple of heads (3), got 64"),
        ("mlp_ratio", 0.0, "ModelSpec(mlp_ratio)"),
        ("bytes_per_value", 0, "ModelSpec(bytes_per_value)"),
        ("optimizer_states", -1, "ModelSpec(optimizer_states)"),
        ("layers", 2.5, "ModelSpec(layers): expected an integer >= 1, got 2.5"),
    ],
)
def test_model_spec_refuses_what_the_model_cannot_train(field, value, message):
    with pytest.raises(ValueError) as refused:
        dataclasses.replace(SPEC, **{field: value})
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "field, value",
    [
        ("flops_per_second", 0.0),
        ("block_overhead", -1e-3),
        ("call_latency", -1e-3),
        ("partner_wait", -1e-3),
        ("embed_overhead", -1.0),
        ("head_overhead", float("nan")),
        ("update_overhead", -1.0),
        ("chunk_bytes", 0),
        ("cores", 0),
        ("link", LinkModel(alpha=-1e-6, beta=1e9)),
        ("link", LinkModel(alpha=1e-6, beta=0.0)),
    ],
)
def test_rates_refuse_negative_costs_and_empty_sizes(field, value):
    with pytest.raises(ValueError, match=rf"Rates\({field}\)"):
        dataclasses.replace(RATES, **{field: value})


def test_measuring_refuses_bad_arguments_before_timing(numpy_backend):
    with pytest.raises(ValueError, match="repeats"):
        measure_rates(SPEC, repeats=0)
    with pytest.raises(ValueError, match="cores"):
        measure_rates(SPEC, cores=0)
    with pytest.raises(ValueError, match="tokens"):
        measure_rates(SPEC, tokens=(0, 32))
    with pytest.raises(ValueError, match="busy"):
        measure_rates(SPEC, busy=-1.0)


def test_plan_command_lays_out_long_sequences_under_a_memory_limit(capsys):
    from nbcoll.__main__ import main

    args = ["plan", "--ranks", "4", "--seq", "256", "--batch", "4", "--top", "40", "--long"]
    assert main(args) == 0
    everything = capsys.readouterr().out
    assert " cp=2" in everything and " recompute" in everything and " sp" in everything
    assert main([*args, "--memory-limit", "20"]) == 0
    limited = capsys.readouterr().out
    rows = [line for line in limited.splitlines() if line.startswith("dp=") and " wins " not in line]
    assert rows and all(float(row.split()[-1]) * 2**20 <= 20e6 for row in rows), limited
    assert f"{len(rows)} layouts fit the memory limit of 20 MB per rank" in limited
    assert main([*args, "--memory-limit", "0.001"]) == 2
    assert "fits the memory limit" in capsys.readouterr().err
