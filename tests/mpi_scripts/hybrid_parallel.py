"""Hybrid layouts on 4 ranks: DP x TP, DP x PP and TP x PP, each trained K steps against one process.

The model is a two-stage transformer LM (embedding + block, then block + norm + head). Its layers are always the
tensor-parallel ones over ``mesh["tp"]`` (a one-rank communicator where tp = 1); data parallelism is
DistributedDataParallel over ``mesh["dp"]`` (each replica gets its half of the global batch); pipeline
parallelism is :class:`Pipeline` over ``mesh["pp"]``. ``mpiexec -n 4 python hybrid_parallel.py`` prints
``hybrid parallel ok: 3 cases`` on every rank.
"""

from __future__ import annotations

import argparse

import numpy as np

import nbcoll
import nbcoll.functional as F
from nbcoll import nn
from nbcoll.parallel import DistributedDataParallel
from nbcoll.parallel.mesh import DeviceMesh
from nbcoll.parallel.pipeline import Pipeline
from nbcoll.parallel.tensor_parallel import (
    ColumnParallelLinear,
    VocabParallelEmbedding,
    full_state_dict,
    load_full_state,
    vocab_parallel_cross_entropy,
)
from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock

VOCAB, DIM, HEADS, BATCH, SEQ = 16, 16, 4, 4, 5


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


def compare(got, want, what):
    assert set(got) == set(want), (what, sorted(set(got) ^ set(want)))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12, err_msg=f"{what}: {name}")


def run_layout(comm, sizes, batches, steps, start) -> dict:
    """Train the LM ``steps`` steps under the layout ``sizes``; returns this rank's stages' full states."""
    mesh = DeviceMesh(comm, **sizes)
    tp, dp, pp = mesh["tp"], mesh["dp"], mesh["pp"]
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
        pipe = Pipeline(stages, pp, chunks=2, schedule="1f1b")
        opt = nbcoll.optim.SGD(pipe.parameters(), lr=0.1, momentum=0.9)
        for ids, targets in batches[:steps]:
            opt.zero_grad()
            pipe.step(ids[rows], targets[rows], loss_fn)
            opt.step()
        own = stages[pp.rank].module if dp.size > 1 else stages[pp.rank]
        states = {pp.rank: full_state_dict(own, tp)}
    mesh.destroy()
    return states


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
    for sizes in [{"dp": 2, "tp": 2}, {"dp": 2, "pp": 2}, {"tp": 2, "pp": 2}]:
        for s, state in run_layout(comm, sizes, batches, steps, start).items():
            compare(state, substate(want, f"stages.{s}."), f"{sizes} stage {s} after {steps} steps")
        cases += 1
    return cases


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    nbcoll.set_default_dtype(np.float64)
    comm = nbcoll.init()
    cases = run(comm, args.steps)
    comm.destroy()
    print(f"rank {comm.rank}: hybrid parallel ok: {cases} cases", flush=True)


if __name__ == "__main__":
    main()
