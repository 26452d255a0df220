"""Meshes, tensor, pipeline and expert parallelism and their hybrids under mpiexec: one launch per rank count.

``mpi_scripts/model_parallel.py`` runs ``mpi_scripts/tensor_parallel.py`` (the mesh communicators; the split
layers against the full ones, forward and every gradient; the vocabulary-parallel cross-entropy, its value,
gradient and a peak memory of one process's over the rank count; two SGD steps with momentum of a two-block
transformer LM against one process), ``mpi_scripts/pipeline.py`` (GPipe and 1F1B trained two steps against one
process; the bubble counted from the recorded schedule; the micro-batches in flight; the timelines drawn),
``mpi_scripts/expert_parallel.py`` (the mixture of experts spread over ranks against every expert local, token
for token, drops counted; two steps against one process) and, on 4 ranks, ``mpi_scripts/hybrid_parallel.py``
(DP x TP, DP x PP and TP x PP against one process). Float64, 1e-10 relative. Two steps are enough: the second
starts from parameters and momentum that the first changed. The schedules themselves, which need no ranks, are
checked here directly.
"""

from pathlib import Path

import pytest

from nbcoll.parallel.pipeline_schedule import (
    SCHEDULES,
    bubble_fraction,
    draw_timeline,
    peak_in_flight,
    schedule_actions,
    timeline,
)
from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "model_parallel.py"
CASES = {2: (15, 11, 6, 0), 3: (15, 11, 6, 0), 4: (19, 11, 6, 3)}  # tensor, pipeline, expert, hybrid cases


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_tensor_pipeline_and_expert_parallel_equal_one_process(nprocs, tmp_path):
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}
    result = run_ranks(nprocs, SCRIPT, "--out", str(tmp_path), env=env, timeout=300)
    tensor_cases, pipeline_cases, expert_cases, hybrid_cases = CASES[nprocs]
    for rank in range(nprocs):
        assert f"tensor parallel ok: {tensor_cases} cases" in result.outputs[rank], result.report()
        assert f"pipeline ok: {pipeline_cases} cases" in result.outputs[rank], result.report()
        assert f"expert parallel ok: {expert_cases} cases" in result.outputs[rank], result.report()
        assert f"hybrid parallel ok: {hybrid_cases} cases" in result.outputs[rank], result.report()
    assert (tmp_path / "1f1b_m8.png").stat().st_size > 0


@pytest.mark.mpi
def test_each_strategy_and_every_hybrid_on_the_simulator_in_float32_at_toy_size():
    """One 4-rank launch, float32, rtol 1e-5 (atol 1e-6) against one process. On two pairs of ranks at once: a
    split head and the vocabulary-parallel loss (loss and input gradient) on ranks 0-1, one SGD step of the
    experts spread over ranks 2-3 (input gradients, every parameter after the step). Then on all four, one SGD
    step of a two-stage column -> row model under DP x TP, DP x PP (GPipe) and TP x PP (1F1B), every parameter:
    tensor parallelism, both pipeline schedules and the three hybrids."""
    env = {"NBCOLL_BACKEND": "sim", "NBCOLL_TIMEOUT": "300"}
    result = run_ranks(4, SCRIPT, "--toy", env=env, timeout=900)
    for rank, name in enumerate(["tensor", "tensor", "expert", "expert"]):
        assert f"rank {rank}: {name} float32 toy ok: 1 cases" in result.outputs[rank], result.report()
        assert f"rank {rank}: hybrid float32 toy ok: 3 cases" in result.outputs[rank], result.report()


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("chunks", [1, 2, 3, 8])
def test_bubble_and_in_flight_counted_from_the_schedule(schedule, stages, chunks):
    actions = [schedule_actions(schedule, stages, s, chunks) for s in range(stages)]
    for stage_actions in actions:  # every micro-batch forward once, then backward once
        assert sorted(stage_actions) == sorted([("F", i) for i in range(chunks)] + [("B", i) for i in range(chunks)])
    assert bubble_fraction(timeline(actions)) == pytest.approx((stages - 1) / (chunks + stages - 1), abs=1e-12)
    peak = max(peak_in_flight(a) for a in actions)
    assert peak == (chunks if schedule == "gpipe" else min(stages, chunks))


def test_a_timeline_is_drawn_and_a_deadlocked_order_refused(tmp_path):
    cells = timeline([schedule_actions("1f1b", 3, s, 4) for s in range(3)])
    assert Path(draw_timeline(cells, tmp_path / "t.png")).stat().st_size > 0
    with pytest.raises(ValueError, match="wait on each other"):
        timeline([[("B", 0), ("F", 0)], [("F", 0), ("B", 0)]])
    with pytest.raises(ValueError, match="schedule"):
        schedule_actions("interleaved", 2, 0, 4)
