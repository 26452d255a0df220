"""Hybrid layouts on 4 ranks: DP x TP, DP x PP and TP x PP, each trained K steps against one process.

The model is a two-stage transformer LM (embedding + block, then block + norm + head). Its layers are always the
tensor-parallel ones over ``mesh.get_group("tp")`` (a one-rank communicator where tp = 1); data parallelism is
DistributedDataParallel over the "dp" group (each replica gets its half of the global batch); pipeline
parallelism is a ``PipelineStage`` per "pp" rank with ``ScheduleGPipe`` under DP x PP, ``Schedule1F1B`` under
TP x PP. ``mpiexec -n 4 python hybrid_parallel.py`` prints ``hybrid parallel ok: 3 cases`` on every rank.
"""

from __future__ import annotations

import numpy as np
from reference_checks import compare_states, main

import nbcoll
import nbcoll.functional as F
from nbcoll import nn
from nbcoll.parallel import DistributedDataParallel
from nbcoll.parallel.mesh import DIMS, DeviceMesh
from nbcoll.parallel.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from nbcoll.parallel.tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    full_state_dict,
    load_full_state,
)
from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock
from nbcoll.parallel.vocab_parallel import VocabParallelEmbedding, vocab_parallel_cross_entropy

VOCAB, DIM, HEADS, BATCH, SEQ = 16, 16, 4, 4, 5
SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Stage(nn.Module):
    """One half of the LM; full layers when ``comm`` is None, tensor-parallel ones over ``comm`` otherwise."""

    def __init__(self, first: bool, comm=None) -> None:
        super().__init__()
        self.first = first
        if first:
            self.embed = nn.Embedding(VOCAB, DIM) if comm is None else VocabParallelEmbedding(VOCAB, DIM, comm)
        if comm is None:
            self.block = nn.TransformerBlock(DIM, HEADS, causal=True)
        else:
            self.block = ParallelTransformerBlock(DIM, HEADS, comm, causal=True)
        if not first:
            self.ln_f = nn.LayerNorm(DIM)
            self.head = nn.Linear(DIM, VOCAB) if comm is None else ColumnParallelLinear(DIM, VOCAB, comm)

    def forward(self, x):
        h = self.block(self.embed(x) if self.first else x)
        return h if self.first else self.head(self.ln_f(h))


class TwoStages(nn.Module):
    def __init__(self, stages) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def forward(self, ids):
        return self.stages[1](self.stages[0](ids))


def reference_run(batches, steps):
    """One process: the full model on the global batches; returns the two stages' states after training."""
    nbcoll.manual_seed(21)
    model = TwoStages([Stage(True), Stage(False)])
    start = model.state_dict()
    opt = nbcoll.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for ids, targets in batches[:steps]:
        opt.zero_grad()
        logits = model(ids)
        F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1)).backward()
        opt.step()
    return start, model.state_dict()


def substate(state, prefix):
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def run_layout(comm, sizes, schedule, batches, steps, start) -> dict:
    """Train the LM ``steps`` steps under the layout ``sizes`` (a pipeline with ``schedule`` where pp > 1); returns
    this rank's stages' full states."""
    mesh = DeviceMesh(comm, tuple(sizes.get(dim, 1) for dim in DIMS), mesh_dim_names=DIMS)
    tp, dp, pp = (mesh.get_group(dim) for dim in ("tp", "dp", "pp"))
    loss_fn = lambda logits, targets: vocab_parallel_cross_entropy(logits, targets, tp)  # noqa: E731
    rows = slice(dp.rank * BATCH // dp.size, (dp.rank + 1) * BATCH // dp.size)  # this replica's share
    stages = [load_full_state(Stage(s == 0, tp), substate(start, f"stages.{s}."), tp) for s in range(2)]
    if pp.size == 1:
        model = TwoStages(stages)
        step_model = DistributedDataParallel(model, dp) if dp.size > 1 else model
        opt = nbcoll.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for ids, targets in batches[:steps]:
            opt.zero_grad()
            loss_fn(step_model(ids[rows]), targets[rows]).backward()
            opt.step()
        states = {s: full_state_dict(stages[s], tp) for s in range(2)}
    else:
        if dp.size > 1:
            stages[pp.rank] = DistributedDataParallel(stages[pp.rank], dp)
        pipe = SCHEDULES[schedule](PipelineStage(stages[pp.rank], pp.rank, pp.size, group=pp), 2, loss_fn=loss_fn)
        opt = nbcoll.optim.SGD(stages[pp.rank].parameters(), lr=0.1, momentum=0.9)
        for ids, targets in batches[:steps]:
            opt.zero_grad()
            pipe.step(ids[rows], target=targets[rows])
            opt.step()
        own = stages[pp.rank].module if dp.size > 1 else stages[pp.rank]
        states = {pp.rank: full_state_dict(own, tp)}
    mesh.destroy()
    return states


def toy_stages(comm=None) -> list[nn.Module]:
    """Two pipeline stages, Linear(3, 4) -> tanh, then Linear(4, 3): full when ``comm`` is None, column then row
    parallel over ``comm`` otherwise. The activation between the stages stays split over ``comm`` (each
    tensor-parallel rank sends its own columns to the next stage's rank of the same tensor-parallel coordinate),
    so the pair needs no collective at the stage boundary."""
    if comm is None:
        return [nn.Sequential(nn.Linear(3, 4), nn.Tanh()), nn.Linear(4, 3)]
    column, row = ColumnParallelLinear(3, 4, comm), RowParallelLinear(4, 3, comm, input_is_parallel=True)
    return [nn.Sequential(column, nn.Tanh()), row]


TOY_LAYOUTS = (  # the three hybrids, the pipeline's two schedules between them
    ({"dp": 2, "tp": 2}, None),
    ({"dp": 2, "pp": 2}, "gpipe"),
    ({"tp": 2, "pp": 2}, "1f1b"),
)


def check_toy_float32(comm, layouts=TOY_LAYOUTS) -> int:
    """One SGD step with momentum (for the simulator, float32) of a two-stage toy model under each 4-rank layout:
    every parameter within rtol 1e-5, atol 1e-6 of one process trained on the same batch of 4 rows. ``layouts``
    pairs the mesh sizes with the pipeline schedule (None without a pipeline)."""
    if comm.size != 4:
        return 0
    nbcoll.set_default_dtype(np.float32)
    rng = np.random.default_rng(23)
    x, target = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    mse = nn.MSELoss()
    nbcoll.manual_seed(24)
    reference = TwoStages(toy_stages())
    start = reference.state_dict()
    if comm.rank == 0:  # one process trains, the others receive its result (the simulator is slow)
        opt = nbcoll.optim.SGD(reference.parameters(), lr=0.5, momentum=0.9)
        mse(reference(nbcoll.tensor(x)), nbcoll.tensor(target)).backward()
        opt.step()
    want = {}
    for name, value in reference.state_dict().items():
        buffer = nbcoll.to_device(np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else value))
        comm.broadcast(buffer, root=0)
        want[name] = nbcoll.to_host(buffer)
    for sizes, schedule in layouts:
        mesh = DeviceMesh(comm, tuple(sizes.get(dim, 1) for dim in DIMS), mesh_dim_names=DIMS)
        tp, dp, pp = (mesh.get_group(dim) for dim in ("tp", "dp", "pp"))
        rows = slice(dp.rank * 4 // dp.size, (dp.rank + 1) * 4 // dp.size)  # this replica's share
        stages = [load_full_state(m, substate(start, f"stages.{s}."), tp) for s, m in enumerate(toy_stages(tp))]
        if pp.size == 1:
            model = TwoStages(stages)
            opt = nbcoll.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
            step_model = DistributedDataParallel(model, dp) if dp.size > 1 else model
            mse(step_model(nbcoll.tensor(x[rows])), nbcoll.tensor(target[rows])).backward()
            mine = range(2)
        else:
            if dp.size > 1:
                stages[pp.rank] = DistributedDataParallel(stages[pp.rank], dp)
            pipe = SCHEDULES[schedule](PipelineStage(stages[pp.rank], pp.rank, pp.size, group=pp), 2, loss_fn=mse)
            opt = nbcoll.optim.SGD(stages[pp.rank].parameters(), lr=0.5, momentum=0.9)
            pipe.step(x[rows], target=target[rows])
            stages[pp.rank] = stages[pp.rank].module if dp.size > 1 else stages[pp.rank]
            mine = [pp.rank]
        opt.step()
        for s in mine:
            got, expected = full_state_dict(stages[s], tp), substate(want, f"stages.{s}.")
            compare_states(got, expected, f"float32 {sizes} stage {s}", rtol=1e-5, atol=1e-6)
        mesh.destroy()
    nbcoll.set_default_dtype(np.float64)
    return len(layouts)


def run(comm, steps: int = 3) -> int:
    if comm.size != 4:
        return 0
    rng = np.random.default_rng(22)
    batches = []
    for _ in range(steps):
        ids = rng.integers(0, VOCAB, (BATCH, SEQ))
        batches.append((ids, np.roll(ids, -1, axis=1)))
    start, want = reference_run(batches, steps)
    cases = 0
    for sizes, schedule in [({"dp": 2, "tp": 2}, None), ({"dp": 2, "pp": 2}, "gpipe"), ({"tp": 2, "pp": 2}, "1f1b")]:
        for s, state in run_layout(comm, sizes, schedule, batches, steps, start).items():
            compare_states(state, substate(want, f"stages.{s}."), f"{sizes} stage {s} after {steps} steps")
        cases += 1
    return cases


if __name__ == "__main__":
    main("hybrid parallel", lambda comm, args: run(comm, args.steps))
