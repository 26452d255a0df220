"""Pipeline parallelism, every case in one launch: K optimizer steps against one process, the recorded schedule.

``mpiexec -n 4 python pipeline.py --out DIR``: float64; each rank also trains the whole model alone (the
reference) and compares its stage. Rank 0 draws the timelines into DIR. Prints ``pipeline ok: N cases``.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from reference_checks import expect_error, main

import nbcoll
from nbcoll import nn
from nbcoll.parallel.pipeline import Pipeline
from nbcoll.parallel.pipeline_schedule import bubble_fraction, draw_timeline, timeline
from nbcoll.parallel.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

WIDTH, CLASSES, BATCH = 8, 3, 16


def build_stages(p: int) -> list[nn.Module]:
    nbcoll.manual_seed(11)
    stages = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(p)]
    stages[-1].append(nn.Linear(WIDTH, CLASSES))
    return stages


def train_case(comm, schedule: str, chunks: int, steps: int) -> ScheduleGPipe | Schedule1F1B:
    p, r = comm.size, comm.rank
    reference = nn.Sequential(*build_stages(p))
    loss_fn = nn.CrossEntropyLoss()
    stage = PipelineStage(build_stages(p)[r], stage_index=r, num_stages=p, group=comm)
    pipe = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule](stage, chunks, loss_fn=loss_fn)
    optimizers = [nbcoll.optim.SGD(m.parameters(), lr=0.2, momentum=0.9) for m in (reference, stage.submod)]
    rng = np.random.default_rng(12)
    for step in range(steps):
        x, y = rng.standard_normal((BATCH, WIDTH)), rng.integers(0, CLASSES, BATCH)
        for opt in optimizers:
            opt.zero_grad()
        want = loss_fn(reference(nbcoll.tensor(x)), nbcoll.tensor(y))
        want.backward()
        losses: list = []
        if r == 0 and r == p - 1:
            output = pipe.step(x, target=y, losses=losses)
        elif r == 0:
            output = pipe.step(x)
        else:
            output = pipe.step(target=y if r == p - 1 else None, losses=losses)
        for opt in optimizers:
            opt.step()
        got = pipe.loss
        np.testing.assert_allclose(got, want.item(), rtol=1e-10, err_msg=f"{schedule} m={chunks} loss, step {step}")
        if r == p - 1:  # the last stage returns its output and each micro-batch's loss, as PyTorch's step does
            assert output.shape == (BATCH, CLASSES) and len(losses) == chunks, (output.shape, len(losses))
            np.testing.assert_allclose(np.mean(losses), want.item(), rtol=1e-10)
        else:
            assert output is None and losses == [], (type(output), losses)
    for name, value in stage.submod.state_dict().items():
        np.testing.assert_allclose(
            value, reference[r].state_dict()[name], rtol=1e-10, atol=1e-12, err_msg=f"{schedule} m={chunks} {name}"
        )
    return pipe


def run(comm, steps: int = 3, out: str = "") -> int:
    """Every case on ``comm`` (float64 must be the default dtype); returns how many passed."""
    p, r, cases = comm.size, comm.rank, 0
    peak_bytes = {}
    for schedule, chunks in [("gpipe", 1), ("gpipe", 8), ("1f1b", 8), ("1f1b", 2)]:
        pipe = train_case(comm, schedule, chunks, steps)
        cells = timeline(pipe.gather_actions())
        bubble = bubble_fraction(cells)
        assert abs(bubble - (p - 1) / (chunks + p - 1)) < 1e-12, (schedule, chunks, bubble)
        if schedule == "gpipe":
            assert pipe.peak_in_flight == chunks, pipe.peak_in_flight
        else:
            assert pipe.peak_in_flight == min(p - r, chunks) <= p, pipe.peak_in_flight
        peak_bytes[schedule, chunks] = pipe.peak_activation_bytes
        if out and r == 0:
            draw_timeline(cells, os.path.join(out, f"{schedule}_m{chunks}.png"), f"{schedule}, {p} stages")
        print(
            f"rank {r}: {schedule} m={chunks}: bubble {bubble:.3f}, in flight {pipe.peak_in_flight}, "
            f"peak memory {pipe.peak_activation_bytes} B",
            flush=True,
        )
        cases += 1
    if r == 0 and p > 1:  # the first stage holds all 8 micro-batches under GPipe, p under 1F1B
        assert peak_bytes["1f1b", 8] < peak_bytes["gpipe", 8], peak_bytes
    stages = build_stages(p)
    stage = stages[r]
    expect_error(lambda: PipelineStage(stage, r, p + 1, group=comm), ["num_stages", f"expected {p}", f"{p + 1}"])
    expect_error(lambda: PipelineStage(stage, (r + 1) % (p + 1), p, group=comm), ["stage_index", f"expected {r}"])
    expect_error(lambda: ScheduleGPipe(PipelineStage(stage, r, p, group=comm), 0, nn.MSELoss()), ["chunks"])
    expect_error(lambda: Schedule1F1B(PipelineStage(stage, r, p, group=comm), 2), ["loss_fn"])
    schedule = ScheduleGPipe(PipelineStage(stage, r, p, group=comm), 3, loss_fn=nn.CrossEntropyLoss())
    expect_error(lambda: schedule.step(np.zeros((4, WIDTH)), target=np.zeros(4, np.int64)), ["chunks=3"])
    # The earlier spelling still trains, and warns that it is deprecated.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe = Pipeline(stages, comm, chunks=2, schedule="1f1b")
    assert any(issubclass(w.category, DeprecationWarning) and "PipelineStage" in str(w.message) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        expect_error(lambda: Pipeline(stages + stages[:1], comm, chunks=2), ["stages", f"{p} stages", f"{p + 1}"])
        expect_error(lambda: Pipeline(stages, comm, chunks=2, schedule="zigzag"), ["schedule", "1f1b"])
    loss = pipe.step(np.ones((4, WIDTH)), np.zeros(4, np.int64), nn.CrossEntropyLoss())
    assert np.isfinite(loss), loss
    return cases + 7


if __name__ == "__main__":
    main(
        "pipeline",
        lambda comm, args: run(comm, args.steps, args.out),
        lambda parser: parser.add_argument("--out", default="", help="a folder for the timelines rank 0 draws"),
    )
