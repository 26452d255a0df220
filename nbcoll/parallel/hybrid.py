"""A transformer language model trained under any ``dp x tp x pp`` layout: the planner's runs, made real.

The model of a :class:`~nbcoll.parallel.plan.ModelSpec` is cut into ``pp`` stages of ``layers / pp`` blocks
(the embedding on the first, the final norm and head on the last). Every layer is tensor parallel over
``mesh["tp"].get_group()`` (a one-rank communicator when tp = 1, where the split layers are the full ones); the
stages form a 1F1B pipeline over ``mesh["pp"]``'s group when pp > 1; DistributedDataParallel averages the
gradients over ``mesh["dp"]``'s group, each replica training on its share of the global batch.

Example::

    spec = ModelSpec(layers=4, hidden=32, seq_len=16, batch=16, heads=4, vocab=32)
    run = HybridLM(spec, comm, Layout(dp=2, tp=1, pp=2, chunks=2))
    loss = run.step(ids, targets)          # global batch (16, 16) ids; the mean loss over it
    run.destroy()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import nbcoll
from nbcoll import nn
from nbcoll.parallel.data_parallel import DistributedDataParallel
from nbcoll.parallel.mesh import DeviceMesh
from nbcoll.parallel.pipelining import PipelineStage, Schedule1F1B
from nbcoll.parallel.plan import Layout, ModelSpec
from nbcoll.parallel.tensor_parallel import ColumnParallelLinear
from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock
from nbcoll.parallel.vocab_parallel import VocabParallelEmbedding, vocab_parallel_cross_entropy

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


class LMStage(nn.Module):
    """``blocks`` tensor-parallel transformer blocks; the embedding first if ``first``, norm and head if ``last``.

    Example::

        stage = LMStage(spec, first=True, last=False, blocks=2, comm=mesh["tp"].get_group())
    """

    def __init__(self, spec: ModelSpec, first: bool, last: bool, blocks: int, comm: Communicator) -> None:
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.embed = VocabParallelEmbedding(spec.vocab, spec.hidden, comm)
        self.blocks = nn.ModuleList(
            [
                ParallelTransformerBlock(spec.hidden, spec.heads, comm, spec.mlp_ratio, causal=True)
                for _ in range(blocks)
            ]
        )
        if last:
            self.ln_f = nn.LayerNorm(spec.hidden)
            self.head = ColumnParallelLinear(spec.hidden, spec.vocab, comm)

    def forward(self, x: Any) -> Any:
        h = self.embed(x) if self.first else x
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h)) if self.last else h


class _Chain(nn.Module):
    def __init__(self, stages: list[nn.Module]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Any) -> Any:
        for stage in self.stages:
            x = stage(x)
        return x


class HybridLM:
    """The LM of ``spec`` on ``comm`` laid out as ``layout``, with SGD; ``step`` trains on one global batch.

    Example::

        run = HybridLM(spec, comm, Layout(dp=1, tp=2, pp=2, chunks=4))
        run.step(ids, np.roll(ids, -1, axis=1))
    """

    def __init__(self, spec: ModelSpec, comm: Communicator, layout: Layout, lr: float = 0.01, seed: int = 0) -> None:
        self.spec, self.layout = spec, layout
        self.mesh = DeviceMesh(comm, (layout.pp, layout.dp, layout.tp), mesh_dim_names=("pp", "dp", "tp"))
        tp, dp, pp = (self.mesh.get_group(dim) for dim in ("tp", "dp", "pp"))
        nbcoll.manual_seed(seed)
        per_stage = spec.layers // layout.pp
        stages = [LMStage(spec, s == 0, s == layout.pp - 1, per_stage, tp) for s in range(layout.pp)]
        self.rows = slice(dp.rank * spec.batch // dp.size, (dp.rank + 1) * spec.batch // dp.size)
        self.loss_fn = lambda logits, targets: vocab_parallel_cross_entropy(logits, targets, tp)
        if layout.pp == 1:
            model = _Chain(stages)
            self.model = DistributedDataParallel(model, dp) if dp.size > 1 else model
            self.pipe = None
            params = model.parameters()
        else:
            if dp.size > 1:
                stages[pp.rank] = DistributedDataParallel(stages[pp.rank], dp)
            stage = PipelineStage(stages[pp.rank], pp.rank, pp.size, group=pp)
            self.pipe = Schedule1F1B(stage, layout.chunks, loss_fn=self.loss_fn)
            params = stages[pp.rank].parameters()
        self.optimizer = nbcoll.optim.SGD(params, lr=lr, momentum=0.9)

    def step(self, ids: np.ndarray, targets: np.ndarray) -> float:
        """One optimizer step on the global batch (every rank passes all of it and takes its share)."""
        ids, targets = np.asarray(ids)[self.rows], np.asarray(targets)[self.rows]
        self.optimizer.zero_grad()
        if self.pipe is None:
            loss = self.loss_fn(self.model(ids), targets)
            loss.backward()
            value = loss.item()
        else:
            self.pipe.step(ids, target=targets)  # every stage passes both: the first reads ids, the last targets
            value = self.pipe.loss
        self.optimizer.step()
        return value

    def destroy(self) -> None:
        self.mesh.destroy()


__all__ = ["HybridLM", "LMStage"]
