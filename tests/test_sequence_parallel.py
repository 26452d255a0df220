"""Sequence parallelism on loopback worlds: training equal to one process, the same wire bytes, smaller activations.

Each rank runs a 2-block transformer whose blocks are split over the ranks (heads and MLP features) and whose
norms, dropouts and residual adds are split along the sequence; one process runs the same model whole from the
same weights and the same seed. Everything is float64 on the numpy backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll import nn, optim
from nbcoll.comm import loopback
from nbcoll.comm.config import CommConfig
from nbcoll.parallel import (
    gather_sequence,
    reduce_scatter_sequence,
    sequence_parallel_block,
    split_sequence,
    tensor_parallel_block,
)
from nbcoll.parallel.tensor_parallel import full_state_dict
from nbcoll.tensors.ops.nn import LayerNorm as LayerNormNode


@pytest.fixture(autouse=True)
def numpy_backend():
    """float64 training steps: the references, not the simulator (which runs every CUDA thread in Python)."""
    with nbcoll.use_backend("numpy"):
        yield


DIM, HEADS, LENGTH, BATCH, STEPS = 24, 12, 12, 2, 3  # 12 heads and 12 positions split over 2, 3 or 4 ranks


class TinyLM(nn.Module):
    """A replicated input projection, two transformer blocks, a replicated head; the blocks split when given."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.inp = nn.Linear(DIM, DIM, dtype=np.float64)
        self.blocks = nn.ModuleList(
            [nn.TransformerBlock(DIM, HEADS, causal=True, dropout=dropout, dtype=np.float64) for _ in range(2)]
        )
        self.head = nn.Linear(DIM, 3, dtype=np.float64)
        self.comm = None

    def split(self, comm, sequence_parallel: bool) -> TinyLM:
        blocks = [tensor_parallel_block(b, comm, sequence_parallel=sequence_parallel) for b in self.blocks]
        self.blocks, self.comm = nn.ModuleList(blocks), comm
        return self

    def forward(self, x):
        h = self.inp(x)
        if self.comm is not None:
            h = split_sequence(h, self.comm)
        for block in self.blocks:
            h = block(h)
        if self.comm is not None:
            h = gather_sequence(h, self.comm)
        return self.head(h)


def data():
    rng = np.random.default_rng(5)
    return rng.standard_normal((BATCH, LENGTH, DIM)), rng.standard_normal((BATCH, LENGTH, 3))


def train(model: TinyLM) -> dict:
    x, target = data()
    opt = optim.SGD(model.parameters(), lr=0.1)
    nbcoll.manual_seed(11)  # the dropout masks: the same draws in one process and on every rank
    for _ in range(STEPS):
        opt.zero_grad()
        F.mse_loss(model(nbcoll.tensor(x)), nbcoll.tensor(target)).backward()
        opt.step()
    return model


def reference(dropout: float) -> dict:
    nbcoll.manual_seed(3)
    return {k: np.asarray(v) for k, v in train(TinyLM(dropout)).state_dict().items()}


@pytest.mark.parametrize("tp", [2, 3, 4])
def test_sequence_parallel_trains_equal_to_one_process(tp):
    dropout = 0.2  # in the attention weights (split by heads) and on both branches (split by positions)
    want = reference(dropout)

    def rank(comm):
        nbcoll.manual_seed(3)  # the same initial weights as the one process, then this rank's shards of them
        model = train(TinyLM(dropout).split(comm, sequence_parallel=True))
        assert type(model.blocks[0]).__name__ == "SequenceParallelBlock"
        return full_state_dict(model, comm)

    for got in loopback.run(tp, rank):
        assert got.keys() == want.keys()
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-10, err_msg=name)


def block_step(comm, sequence_parallel: bool):
    """One forward and backward of one block; returns its wire bytes, by collective, and its saved LayerNorm bytes."""
    nbcoll.manual_seed(3)
    block = tensor_parallel_block(nn.TransformerBlock(DIM, HEADS, dtype=np.float64), comm, sequence_parallel)
    x, _ = data()
    x = nbcoll.tensor(x, requires_grad=True)
    if sequence_parallel:
        x = split_sequence(x, comm)
    comm.reset_counters()
    counted = CountingComm(comm)
    for module in block.modules():
        if hasattr(module, "comm"):
            module.comm = counted
    y = block(x)
    saved = saved_layer_norm_bytes(y, {id(p.data) for p in block.parameters()})
    (y * y).sum().backward()
    return counted.bytes, saved


class CountingComm:
    """The communicator, with the bytes each kind of collective sent (from its own traffic counters) added up."""

    def __init__(self, comm) -> None:
        self.comm, self.bytes = comm, {}

    def __getattr__(self, name):
        attr = getattr(self.comm, name)
        if name not in ("all_reduce", "all_gather", "reduce_scatter"):
            return attr

        def counted(send, recv, *args, **kwargs):
            before = self.comm.counters.bytes_sent
            attr(send, recv, *args, **kwargs)
            kind = name if send.size > DIM else "all_reduce of parameter gradients"
            self.bytes[kind] = self.bytes.get(kind, 0) + self.comm.counters.bytes_sent - before

        return counted


def saved_layer_norm_bytes(y, parameters: set[int]) -> int:
    """Activation bytes saved for backward by the graph's LayerNorm nodes: their inputs and statistics, not the
    weights (the arrays whose ids are in ``parameters``), which every rank holds whole either way."""
    seen, stack, total = set(), [y.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.function is LayerNormNode:
            total += sum(a.nbytes for a in node.saved_tensors if a is not None and id(a) not in parameters)
        stack.extend(t.grad_fn for t in node.inputs if t is not None)
    return total


@pytest.mark.parametrize("tp", [2, 3, 4])
def test_sequence_parallel_moves_the_same_activation_bytes_and_saves_1_over_tp(tp):
    # The ring everywhere: its all-reduce is a reduce-scatter and an all-gather. (For small messages the tuner
    # may pick a direct all-reduce, which sends every peer the whole buffer: more than the split collectives.)
    ring = CommConfig(algo="ring")
    plain = loopback.run(tp, block_step, False, config=ring)
    split = loopback.run(tp, block_step, True, config=ring)
    activation = BATCH * LENGTH * DIM * 8  # one (N, L, E) float64 tensor

    def ring_all_reduce(nbytes: int) -> int:  # what one rank sends: (n - 1) / n of it twice
        return 2 * (tp - 1) * nbytes // tp

    for (tp_bytes, tp_saved), (sp_bytes, sp_saved) in zip(plain, split, strict=True):
        # Two all-reduces forward, two backward, become as many all-gathers and reduce-scatters, byte for byte.
        assert tp_bytes == {"all_reduce": 4 * ring_all_reduce(activation)}
        assert sp_bytes["all_gather"] + sp_bytes["reduce_scatter"] == tp_bytes["all_reduce"]
        # Plus one small all-reduce per replicated vector that saw only its positions: 2 norms x 2 + 2 biases.
        assert sp_bytes["all_reduce of parameter gradients"] == 6 * ring_all_reduce(DIM * 8)
        # What the norms keep for backward: this rank's positions only.
        assert sp_saved * tp == tp_saved > 0


def test_a_sequence_that_does_not_split_evenly_is_refused():
    def rank(comm):
        with pytest.raises(ValueError, match=r"x: sequence parallelism splits dim 1 .* into 2 equal parts"):
            split_sequence(nbcoll.tensor(np.zeros((1, 5, DIM))), comm)
        with pytest.raises(ValueError, match=r"x: .*got shape \(1, 3, 4\)"):
            reduce_scatter_sequence(nbcoll.tensor(np.zeros((1, 3, 4))), comm)
        return True

    assert loopback.run(2, rank) == [True, True]


def test_sequence_parallel_block_in_eval_mode_matches_and_drops_nothing():
    block = nn.TransformerBlock(DIM, HEADS, dropout=0.5, dtype=np.float64).eval()
    x = nbcoll.tensor(data()[0])
    want = block(x).numpy()

    def rank(comm):
        split = sequence_parallel_block(block, comm)
        assert not split.training
        return gather_sequence(split(split_sequence(x, comm)), comm).numpy()

    for got in loopback.run(2, rank):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
