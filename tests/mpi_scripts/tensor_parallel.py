"""Meshes and tensor parallelism, every case in one launch: each compared with one process on the same weights.

``mpiexec -n 4 python tensor_parallel.py [--steps 3]``: float64; every rank also runs the full model itself (the
one-process reference) and compares. Prints ``tensor parallel ok: N cases`` on every rank.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
from reference_checks import close, compare_states, expect_error, main

import nbcoll
import nbcoll.functional as F
from nbcoll import memory, nn
from nbcoll.parallel.mesh import DIMS, DeviceMesh
from nbcoll.parallel.tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    full_state_dict,
    load_full_state,
)
from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock, tensor_parallel_block
from nbcoll.parallel.vocab_parallel import VocabParallelEmbedding, vocab_parallel_cross_entropy


def gather_ranks(comm, value: int) -> list[int]:
    out = nbcoll.zeros(comm.size, np.int64)
    comm.all_gather(nbcoll.to_device(np.array([value], np.int64)), out)
    return nbcoll.to_host(out).tolist()


def check_meshes(comm) -> int:
    n, cases = comm.size, 0
    layouts = [{"dp": n}, {"tp": n}, {"pp": n}, {"ep": n}]
    if n == 4:
        layouts += [{"dp": 2, "tp": 2}, {"dp": 2, "pp": 2}, {"tp": 2, "pp": 2}, {"ep": 2, "dp": 2}]
    for sizes in layouts:
        shape = tuple(sizes.get(dim, 1) for dim in DIMS)
        mesh = DeviceMesh(comm, shape, mesh_dim_names=DIMS)
        assert mesh.rank_of(**mesh.coords) == comm.rank and mesh.shape == shape
        assert mesh.mesh.shape == shape and int(mesh.mesh[tuple(mesh.get_coordinate())]) == comm.rank
        for i, dim in enumerate(DIMS):
            sub = mesh[dim]
            members = gather_ranks(sub.get_group(), comm.rank)
            want = [mesh.rank_of(**{**mesh.coords, dim: k}) for k in range(shape[i])]
            assert members == want, f"{sizes} {dim}: members {members}, expected {want}"
            assert sub.mesh.tolist() == want and sub.get_group() is mesh.get_group(dim)
            assert mesh.get_local_rank(dim) == mesh.coords[dim] == sub.get_local_rank() and mesh.size(dim) == shape[i]
        if n == 4 and len(sizes) == 2:  # a 2-D sub-mesh of the 4-D one is the world, dimensions in mesh order
            both = [d for d in DIMS if d in sizes]
            sub = mesh[tuple(both)]
            assert sub.shape == tuple(sizes[d] for d in both) and sub.world.size == 4  # the ranks of both
            assert gather_ranks(sub.world, comm.rank) == [0, 1, 2, 3]
            inner = gather_ranks(sub.get_group(both[1]), comm.rank)  # built on first use, on every rank alike
            assert inner == gather_ranks(mesh.get_group(both[1]), comm.rank), inner
            backwards = tuple(reversed(both))
            expect_error(lambda m=mesh, b=backwards: m[b], ["in that order"], errors=(KeyError,))
        mesh.destroy()
        cases += 1
    expect_error(lambda: DeviceMesh(comm, (n + 1,), mesh_dim_names=("dp",)), ["dp=", "world size", str(n)])
    expect_error(lambda: DeviceMesh(comm, (0, n), mesh_dim_names=("pp", "tp")), ["pp"])
    expect_error(lambda: DeviceMesh(comm, (n,), mesh_dim_names=("dp", "tp")), ["mesh_dim_names", "1 distinct"])
    # The keyword spelling still builds the same mesh, and warns.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = DeviceMesh(comm, dp=n)
        assert old.shape == (1, n, 1, 1) and old.mesh_dim_names == DIMS
        assert old["dp"].all_reduce is not None  # the sub-mesh still forwards the communicator's methods
    assert sum(issubclass(w.category, DeprecationWarning) for w in caught) == 2, [str(w.message) for w in caught]
    old.destroy()
    return cases + 1


def check_layers(comm) -> int:
    """Column and row parallel linear layers, the vocabulary-parallel embedding: forward and every gradient."""
    n, r = comm.size, comm.rank
    nbcoll.manual_seed(1)
    up, down = nn.Linear(5, 4 * n), nn.Linear(4 * n, 3)
    x = np.random.default_rng(2).standard_normal((6, 5))
    full_x = nbcoll.tensor(x, requires_grad=True)
    (down(up(full_x).tanh()) ** 2).sum().backward()
    col = load_full_state(ColumnParallelLinear(5, 4 * n, comm), up.state_dict(), comm)
    row = load_full_state(RowParallelLinear(4 * n, 3, comm, input_is_parallel=True), down.state_dict(), comm)
    tp_x = nbcoll.tensor(x, requires_grad=True)
    (row(col(tp_x).tanh()) ** 2).sum().backward()
    close(tp_x.grad.numpy(), full_x.grad.numpy(), "input gradient through column -> row")
    rows = slice(4 * r, 4 * r + 4)
    close(col.weight.grad.numpy(), up.weight.grad.numpy()[rows], "column weight gradient")
    close(col.bias.grad.numpy(), up.bias.grad.numpy()[rows], "column bias gradient")
    close(row.weight.grad.numpy(), down.weight.grad.numpy()[:, rows], "row weight gradient")
    close(row.bias.grad.numpy(), down.bias.grad.numpy(), "row bias gradient")
    # gather_output: the full features on every rank, the gradient back to this rank's rows only
    gathered = load_full_state(ColumnParallelLinear(5, 4 * n, comm, gather_output=True), up.state_dict(), comm)
    up.zero_grad()
    weights = np.random.default_rng(3).standard_normal((6, 4 * n))
    (up(nbcoll.tensor(x)) * nbcoll.tensor(weights)).sum().backward()
    y = gathered(nbcoll.tensor(x))
    close(y.numpy(), up(nbcoll.tensor(x)).numpy(), "gathered column output")
    (y * nbcoll.tensor(weights)).sum().backward()
    close(gathered.weight.grad.numpy(), up.weight.grad.numpy()[rows], "gathered column weight gradient")
    # the embedding: ids from every rank's block, repeated ids included
    table = nn.Embedding(6 * n, 4)
    ids = np.random.default_rng(4).integers(0, 6 * n, (3, 7))
    weights = np.random.default_rng(5).standard_normal((3, 7, 4))
    (table(ids) * nbcoll.tensor(weights)).sum().backward()
    split = load_full_state(VocabParallelEmbedding(6 * n, 4, comm), table.state_dict(), comm)
    out = split(ids)
    close(out.numpy(), table(ids).numpy(), "vocab-parallel embedding forward")
    (out * nbcoll.tensor(weights)).sum().backward()
    close(split.weight.grad.numpy(), table.weight.grad.numpy()[6 * r : 6 * r + 6], "embedding gradient")
    return 3


def check_cross_entropy(comm) -> int:
    """Equal to the full cross-entropy, and the memory it holds at its peak shrinks with the rank count."""
    n, r = comm.size, comm.rank
    rows, vocab = 48, 240
    rng = np.random.default_rng(6)
    logits, targets = rng.standard_normal((rows, vocab)) * 3, rng.integers(0, vocab, rows)
    full = nbcoll.tensor(logits, requires_grad=True)
    want = F.cross_entropy(full, targets)
    want.backward()
    per = vocab // n
    local = nbcoll.tensor(np.ascontiguousarray(logits[:, per * r : per * (r + 1)]), requires_grad=True)
    got = vocab_parallel_cross_entropy(local, targets, comm)
    close(got.item(), want.item(), "vocab-parallel cross-entropy")
    got.backward()
    close(local.grad.numpy(), full.grad.numpy()[:, per * r : per * (r + 1)], "cross-entropy logits gradient")

    def peak_bytes(logits_slice, group) -> int:
        x = nbcoll.tensor(np.ascontiguousarray(logits_slice), requires_grad=True)
        gc.collect()
        memory.reset_peak_stats()
        before = memory.stats().allocated_bytes
        vocab_parallel_cross_entropy(x, targets, group).backward()
        return memory.stats().peak_bytes - before

    solo = comm.split(r)  # one rank alone: the same code on the full logits
    one_process = peak_bytes(logits, solo)
    split = peak_bytes(logits[:, per * r : per * (r + 1)], comm)
    solo.destroy()
    # Every array the split loss allocates is (rows, V / n) or (rows,), so its peak is one process's over n plus
    # a few per-row vectors; one array of the full logits' size on top would break the bound.
    full_logits = rows * vocab * 8
    assert split <= one_process / n + 128 * rows < one_process / n + full_logits, (split, one_process)
    print(f"rank {r}: cross-entropy peak {split} B on {n} ranks, {one_process} B in one process", flush=True)
    return 2


class TinyLM(nn.Module):
    """Embedding, transformer blocks, a final norm and a head; split when ``comm`` is given."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, comm=None) -> None:
        super().__init__()
        self.comm = comm
        if comm is None:
            self.embed = nn.Embedding(vocab, dim)
            self.blocks = nn.ModuleList([nn.TransformerBlock(dim, heads, causal=True) for _ in range(layers)])
            self.head = nn.Linear(dim, vocab)
        else:
            self.embed = VocabParallelEmbedding(vocab, dim, comm)
            blocks = [ParallelTransformerBlock(dim, heads, comm, causal=True) for _ in range(layers)]
            self.blocks = nn.ModuleList(blocks)
            self.head = ColumnParallelLinear(dim, vocab, comm)
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids, targets):
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h)
        logits = self.head(self.ln_f(h))
        if self.comm is None:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return vocab_parallel_cross_entropy(logits, targets, self.comm)


def check_training(comm, steps: int) -> int:
    """K optimizer steps of a 2-block transformer LM, split over every rank, against one process."""
    vocab, dim, heads = 24, 24, 12  # heads, MLP width (96) and vocabulary divide by 2, 3 and 4
    nbcoll.manual_seed(7)
    full = TinyLM(vocab, dim, heads, layers=2)
    split = load_full_state(TinyLM(vocab, dim, heads, layers=2, comm=comm), full.state_dict(), comm)
    optimizers = [nbcoll.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (full, split)]
    rng = np.random.default_rng(8)
    for step in range(steps):
        ids = rng.integers(0, vocab, (3, 6))
        targets = np.roll(ids, -1, axis=1)
        losses = []
        for model, opt in zip((full, split), optimizers, strict=True):
            opt.zero_grad()
            loss = model(ids, targets)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        close(losses[1], losses[0], f"loss at step {step}")
    compare_states(full_state_dict(split, comm), full.state_dict(), f"after {steps} steps")
    # A block built straight from a full block equals it.
    block = nn.TransformerBlock(dim, heads, causal=True)
    x = nbcoll.tensor(np.random.default_rng(9).standard_normal((2, 5, dim)))
    close(tensor_parallel_block(block, comm)(x).numpy(), block(x).numpy(), "tensor_parallel_block forward")
    return 2


def check_bad_use(comm) -> int:
    n = comm.size
    if n == 1:
        return 0
    expect_error(lambda: RowParallelLinear(4 * n + 1, 4, comm), ["in_features", "not divisible"])
    expect_error(
        lambda: ParallelTransformerBlock(4 * n, n, comm, mlp_ratio=(4 * n + 1) / (4 * n)), ["hidden size", "divisible"]
    )
    expect_error(
        lambda: ParallelTransformerBlock(4 * n + 1, 4 * n + 1, comm, mlp_ratio=n), ["num_heads", "not divisible"]
    )
    return 3


def check_toy_float32(comm) -> int:
    """A split head and the vocabulary-parallel loss, float32 at toy sizes (for the simulator): the loss and the
    input gradient within rtol 1e-5 of the full head and cross-entropy. (The column -> row pair is checked in
    float32 on the simulator by the TP x PP hybrid of ``hybrid_parallel.py``.)"""
    n = comm.size
    nbcoll.set_default_dtype(np.float32)
    nbcoll.manual_seed(1)
    head = nn.Linear(4, 2 * n)
    split_head = load_full_state(ColumnParallelLinear(4, 2 * n, comm), head.state_dict(), comm)
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    targets = np.array([1, 2 * n - 1])
    losses, grads = [], []
    for loss_of in [
        lambda h: F.cross_entropy(head(h), targets),
        lambda h: vocab_parallel_cross_entropy(split_head(h), targets, comm),  # the logits stay split
    ]:
        xt = nbcoll.tensor(x, requires_grad=True)
        loss = loss_of(xt)
        loss.backward()
        losses.append(loss.item())
        grads.append(xt.grad.numpy())
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5, err_msg="float32 loss")
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6, err_msg="float32 input gradient")
    nbcoll.set_default_dtype(np.float64)
    return 1


def run(comm, steps: int = 3) -> int:
    """Every case on ``comm`` (float64 must be the default dtype); returns how many passed."""
    cases = check_meshes(comm)
    cases += check_layers(comm)
    cases += check_cross_entropy(comm)
    cases += check_training(comm, steps)
    return cases + check_bad_use(comm)


if __name__ == "__main__":
    main(
        "tensor parallel",
        lambda comm, args: check_toy_float32(comm) if args.toy else run(comm, args.steps),
        lambda parser: parser.add_argument("--toy", action="store_true", help="only the float32 toy case (simulator)"),
    )
