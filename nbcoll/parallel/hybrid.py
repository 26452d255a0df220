"""A transformer language model trained under any ``dp x tp x pp x cp`` layout: the planner's runs, made real.

The model of a :class:`~nbcoll.parallel.plan.ModelSpec` is cut into ``pp`` stages of ``layers / pp`` blocks
(the embedding on the first, the final norm and head on the last). Every layer is tensor parallel over
``mesh["tp"].get_group()`` (a one-rank communicator when tp = 1, where the split layers are the full ones); the
stages form a 1F1B pipeline over ``mesh["pp"]``'s group when pp > 1; DistributedDataParallel averages the
gradients over the replicas, each training on its share of the global batch. The layout's other three choices:

- ``cp`` (context parallelism): each rank of ``mesh["cp"]`` holds the zig-zag block of the sequence
  (:func:`~nbcoll.parallel.context_parallel.zigzag_positions`) and attention runs as causal ring attention over
  that group. Everything but attention works on each position alone, so the cp ranks are replicas of the
  parameters too: the gradients are averaged over ``mesh["dp", "cp"]``, every rank's loss being the mean over
  as many tokens.
- ``sp`` (sequence parallelism, with tp > 1): the blocks and the final norm are the sequence-parallel ones
  (:mod:`nbcoll.parallel.sequence_parallel`), each tp rank holding ``1 / tp`` of the (cp-local) positions
  outside the split regions; the head all-gathers them.
- ``recompute``: every block is wrapped by :func:`~nbcoll.utils.checkpoint_wrapper`.

Example::

    spec = ModelSpec(layers=4, hidden=32, seq_len=16, batch=16, heads=4, vocab=32)
    run = HybridLM(spec, comm, Layout(dp=2, tp=1, pp=2, chunks=2))
    loss = run.step(ids, targets)          # global batch (16, 16) ids; this rank's mean loss
    run.destroy()
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

import numpy as np

import nbcoll
from nbcoll import memory, nn
from nbcoll.parallel.context_parallel import ring_attention, zigzag_positions
from nbcoll.parallel.data_parallel import DistributedDataParallel
from nbcoll.parallel.mesh import DeviceMesh
from nbcoll.parallel.pipelining import PipelineStage, Schedule1F1B
from nbcoll.parallel.plan import Layout, ModelSpec
from nbcoll.parallel.sequence_parallel import (
    SequenceParallelAttention,
    SequenceParallelBlock,
    SequenceParallelLayerNorm,
    all_gather_sequence,
    split_sequence,
)
from nbcoll.parallel.tensor_parallel import ColumnParallelLinear, copy_to_region, full_state_dict, load_full_state
from nbcoll.parallel.tensor_parallel_transformer import ParallelAttention, ParallelTransformerBlock
from nbcoll.parallel.vocab_parallel import VocabParallelEmbedding, vocab_parallel_cross_entropy
from nbcoll.utils import checkpoint_wrapper

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


def _ring_attend(attn: ParallelAttention, x: Any, cp: Communicator) -> Any:
    """``attn``'s heads on every position of this cp rank's block ``x``, attending over the whole sequence."""
    q, k, v = (attn._heads(proj.local_forward(x)) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    out = ring_attention(q, k, v, cp, causal=True)  # (N, local heads, local length, head dim)
    n, heads, length, _ = out.shape
    return attn.out_proj(out.transpose(0, 2, 1, 3).reshape(n, length, heads * attn.head_dim))


class _RingAttention(ParallelAttention):
    """This rank's heads (over tp) of causal attention by ring over ``cp``."""

    def __init__(self, spec: ModelSpec, tp: Communicator, cp: Communicator) -> None:
        super().__init__(spec.hidden, spec.heads, tp, causal=True)
        self.cp = cp

    def forward(self, x: Any) -> Any:
        return _ring_attend(self, copy_to_region(x, self.comm), self.cp)


class _SequenceRingAttention(SequenceParallelAttention):
    """As :class:`_RingAttention`, from and to this tp rank's positions (all-gather in, reduce-scatter out)."""

    def __init__(self, spec: ModelSpec, tp: Communicator, cp: Communicator) -> None:
        super().__init__(spec.hidden, spec.heads, tp, causal=True)
        self.cp = cp

    def forward(self, x: Any) -> Any:
        return _ring_attend(self, all_gather_sequence(x, self.comm), self.cp)


def _block(spec: ModelSpec, tp: Communicator, cp: Communicator | None, sp: bool) -> nn.Module:
    kind = SequenceParallelBlock if sp else ParallelTransformerBlock
    block = kind(spec.hidden, spec.heads, tp, mlp_ratio=spec.mlp_ratio, causal=True)
    if cp is not None and cp.size > 1:
        block.attn = (_SequenceRingAttention if sp else _RingAttention)(spec, tp, cp)
    return block


class LMStage(nn.Module):
    """``blocks`` tensor-parallel transformer blocks; the embedding first if ``first``, norm and head if ``last``.

    ``cp`` (a communicator) runs attention by ring over it, ``sp`` makes the blocks sequence parallel over
    ``comm``, ``recompute`` checkpoints every block.

    Example::

        stage = LMStage(spec, first=True, last=False, blocks=2, comm=mesh["tp"].get_group())
    """

    def __init__(
        self,
        spec: ModelSpec,
        first: bool,
        last: bool,
        blocks: int,
        comm: Communicator,
        cp: Communicator | None = None,
        sp: bool = False,
        recompute: bool = False,
    ) -> None:
        super().__init__()
        self.first, self.last, self.sp, self.comm = first, last, sp, comm
        if first:
            self.embed = VocabParallelEmbedding(spec.vocab, spec.hidden, comm)
        self.blocks = nn.ModuleList([_block(spec, comm, cp, sp) for _ in range(blocks)])
        if recompute:
            for block in self.blocks:
                checkpoint_wrapper(block)  # keep the block's input only; backward runs its forward again
        if last:
            self.ln_f = SequenceParallelLayerNorm(spec.hidden, comm) if sp else nn.LayerNorm(spec.hidden)
            self.head = ColumnParallelLinear(spec.hidden, spec.vocab, comm)

    def forward(self, x: Any) -> Any:
        h = self.embed(x) if self.first else x
        if self.first and self.sp:
            h = split_sequence(h, self.comm)  # this tp rank's positions from here to the head
        for block in self.blocks:
            h = block(h)
        if not self.last:
            return h
        if self.sp:
            return self.head.local_forward(all_gather_sequence(self.ln_f(h), self.comm))
        return self.head(self.ln_f(h))


class _Chain(nn.Module):
    def __init__(self, stages: list[nn.Module]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Any) -> Any:
        for stage in self.stages:
            x = stage(x)
        return x


def _settled_bytes(comm: Communicator) -> int:
    """Collective: the bytes this thread holds once every rank's garbage is collected."""
    comm.barrier()
    gc.collect()
    comm.barrier()
    return memory.stats(this_thread=True).allocated_bytes


class HybridLM:
    """The LM of ``spec`` on ``comm`` laid out as ``layout``, with SGD; ``step`` trains on one global batch.

    ``state`` (a full model's :meth:`full_state_dict`, e.g. one process's) sets the parameters instead of
    ``seed``: so layouts start from the same model and train equally.

    Example::

        run = HybridLM(spec, comm, Layout(dp=1, tp=2, pp=2, chunks=4))
        run.step(ids, np.roll(ids, -1, axis=1))
        ring = HybridLM(spec, comm, Layout(1, 1, 1, 1, cp=4, recompute=True), state=run.full_state_dict())
    """

    def __init__(
        self,
        spec: ModelSpec,
        comm: Communicator,
        layout: Layout,
        lr: float = 0.01,
        seed: int = 0,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.spec, self.layout, self.world = spec, layout, comm
        self.baseline = _settled_bytes(comm)  # before the mesh and the model
        cp_size = layout.cp
        if spec.seq_len % (2 * cp_size) or (layout.sp and (spec.seq_len // cp_size) % layout.tp):
            raise ValueError(
                f"layout: cp={cp_size} needs a sequence of 2 x cp chunks (and sp one of tp parts per cp rank); "
                f"got seq_len {spec.seq_len} under {layout}"
            )
        if layout.sp and layout.tp == 1:
            raise ValueError(f"layout: sequence parallelism splits over tp, which is 1 in {layout}")
        shape = (layout.pp, layout.dp, cp_size, layout.tp)
        self.mesh = DeviceMesh(comm, shape, mesh_dim_names=("pp", "dp", "cp", "tp"))
        tp, dp, pp, cp = (self.mesh.get_group(dim) for dim in ("tp", "dp", "pp", "cp"))
        self.tp, self.pp = tp, pp
        replicas = self.mesh["dp", "cp"].world if cp_size > 1 else dp  # the ranks holding the same weights
        nbcoll.manual_seed(seed)
        self.per_stage = per_stage = spec.layers // layout.pp
        stages = [
            LMStage(spec, s == 0, s == layout.pp - 1, per_stage, tp, cp, layout.sp, layout.recompute)
            for s in range(layout.pp)
        ]
        if state is not None:
            for s, stage in enumerate(stages):
                load_full_state(stage, self._stage_state(state, s, stage), tp)
        self.stage = stages[pp.rank]
        self.rows = slice(dp.rank * spec.batch // dp.size, (dp.rank + 1) * spec.batch // dp.size)
        self.positions = zigzag_positions(spec.seq_len, cp_size, cp.rank) if cp_size > 1 else slice(None)
        self.loss_fn = lambda logits, targets: vocab_parallel_cross_entropy(logits, targets, tp)
        # DistributedDataParallel finds its parameters in the forward's graph, where a recomputed block's are not:
        # with recomputation the gradients are averaged after backward instead, in place, one call each.
        self.replicas = replicas if layout.recompute and replicas.size > 1 else None
        wrap = replicas.size > 1 and not layout.recompute
        if layout.pp == 1:
            model = _Chain(stages)
            self.model = DistributedDataParallel(model, replicas) if wrap else model
            self.pipe = None
            params = model.parameters()
        else:
            if wrap:
                stages[pp.rank] = DistributedDataParallel(stages[pp.rank], replicas)
            stage = PipelineStage(stages[pp.rank], pp.rank, pp.size, group=pp)
            self.pipe = Schedule1F1B(stage, layout.chunks, loss_fn=self.loss_fn)
            params = stages[pp.rank].parameters()
        self.optimizer = nbcoll.optim.SGD(params, lr=lr, momentum=0.9)

    def _stage_state(self, state: dict[str, Any], s: int, stage: LMStage) -> dict[str, Any]:
        """The entries of a full model's state that stage ``s`` holds, under the stage's own names."""
        own, offset = set(stage.state_dict()), s * self.per_stage
        local = {}
        for name, value in state.items():
            if name.startswith("blocks."):
                index, rest = name[len("blocks.") :].split(".", 1)
                name = f"blocks.{int(index) - offset}.{rest}"
            if name in own:
                local[name] = value
        return local

    def full_state_dict(self) -> dict[str, np.ndarray]:
        """Collective over tp: this rank's pipeline stage as a full model's entries (host arrays), blocks numbered
        as in the whole model; with pp = 1, the whole model."""
        state = full_state_dict(self.stage, self.tp)
        offset = self.pp.rank * self.per_stage
        named = {}
        for name, value in state.items():
            if name.startswith("blocks."):
                index, rest = name[len("blocks.") :].split(".", 1)
                name = f"blocks.{int(index) + offset}.{rest}"
            named[name] = value
        return named

    def step(self, ids: np.ndarray, targets: np.ndarray) -> float:
        """One optimizer step on the global batch (every rank passes all of it and takes its share)."""
        ids = np.asarray(ids)[self.rows][:, self.positions]
        targets = np.asarray(targets)[self.rows][:, self.positions]
        self.optimizer.zero_grad()
        if self.pipe is None:
            loss = self.loss_fn(self.model(ids), targets)
            loss.backward()
            value = loss.item()
        else:
            self.pipe.step(ids, target=targets)  # every stage passes both: the first reads ids, the last targets
            value = self.pipe.loss
        if self.replicas is not None:
            for p in self.stage.parameters():
                self.replicas.all_reduce(p.grad.data, p.grad.data, op="avg")
        self.optimizer.step()
        return value

    def step_peak_bytes(self, ids: np.ndarray, targets: np.ndarray) -> int:
        """One :meth:`step`, returning the most bytes this rank held at once during it, counted from before the
        model was built (parameters, gradients, optimizer state, activations, communication buffers): what the
        planner's memory per rank stands for. Counted per thread, so that loopback ranks measure their own.

        Collective. The garbage collector is held off during the step: loopback ranks share it, and where it
        runs would move the peak from one step to the next."""
        _settled_bytes(self.world)
        gc.disable()
        try:
            memory.reset_peak_stats()
            self.step(ids, targets)
            peak = memory.stats(this_thread=True).peak_bytes
        finally:
            self.world.barrier()  # every rank's step is over before any turns the collector back on
            gc.enable()
        return peak - self.baseline

    def destroy(self) -> None:
        self.mesh.destroy()


__all__ = ["HybridLM", "LMStage"]
