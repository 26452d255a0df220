"""
Long sequences: a causal language model that one rank cannot train within a memory limit
========================================================================================

Trained on 4 ranks with ring attention and recomputation, exactly as one process would train it.

What you learn here:

- where the memory of a long sequence goes: every layer keeps its activations for backward, and attention's
  scores grow with the square of the length;
- what recomputation (``nbcoll.utils.checkpoint_wrapper``) saves: a block keeps only its input, and backward runs
  its forward again;
- what context parallelism saves: each rank keeps its own block of the sequence, and ring attention passes the
  key/value blocks round the ring, merging partial results with the online softmax, so no rank ever holds the
  whole sequence's scores;
- why the causal mask needs the zig-zag layout (rank ``r`` holds chunks ``r`` and ``2n-1-r``): every rank then
  does the same work at every step of the ring, drawn at the end;
- that nbcoll's planner, told the memory limit, picks that same layout among every layout of the ranks;
- that the split model's loss and parameters equal one process's, step for step.

Run it with ``python tutorials/24_long_sequences.py [--out DIR]``: it re-launches itself on 4 ranks and draws the
ring's steps into DIR (by default a temporary folder, removed at the end). On the simulator
(``NBCOLL_BACKEND=sim``), where every GPU thread runs in Python, it runs the same steps at toy sizes.

Without a GPU, its tests and the docs build run it at full size with ``NBCOLL_BACKEND=numpy``.
"""

# %%
# Set-up
# ------
#
# The tutorial re-launches itself on 4 ranks; everything after ``relaunch`` runs on each of them. On the
# simulator the sizes are toys and there is no memory limit.

import nbcoll.launch

nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import argparse  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402

import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import memory, nn  # noqa: E402
from nbcoll.datasets import load_text  # noqa: E402
from nbcoll.parallel import all_reduce_shared_gradients, ring_attention  # noqa: E402
from nbcoll.parallel.context_parallel import zigzag_positions  # noqa: E402
from nbcoll.parallel.plan import Layout, ModelSpec, explain, plan  # noqa: E402
from nbcoll.utils import checkpoint_wrapper  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="", help="a folder for the drawing of the ring (default: a temporary one)")
args = parser.parse_args()

nbcoll.set_default_dtype(np.float64)
comm = nbcoll.init()
rank, n = comm.rank, comm.size
TINY = nbcoll.get_backend() == "sim"
SEQ, DIM, HEADS, BLOCKS, STEPS = (16, 4, 2, 1, 1) if TINY else (256, 16, 2, 3, 2)
LIMIT = 1_500_000 if not TINY else None  # bytes of activations a rank may hold at once in this exercise


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


def everyone(value: int) -> list[int]:
    got = nbcoll.zeros(n, np.int64)
    comm.all_gather(nbcoll.to_device(np.array([value], np.int64)), got)
    return nbcoll.to_host(got).tolist()


# %%
# The model
# ---------
#
# A small causal transformer over characters. Only attention looks across positions; everything else
# (norms, projections, the MLP, the head and the loss) works on each position alone, so a rank that holds some
# positions can run it on them by itself.


class Block(nn.Module):
    """Pre-norm attention and MLP; attention by ring over ``comm`` (one rank: ordinary causal attention)."""

    def __init__(self, comm) -> None:
        super().__init__()
        self.comm = comm
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc_in, self.fc_out = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, length, _ = x.shape
        q, k, v = (
            t.reshape(b, length, HEADS, DIM // HEADS).transpose(0, 2, 1, 3)
            for t in self.qkv(self.ln1(x)).split(3, axis=-1)
        )
        attended = ring_attention(q, k, v, self.comm, causal=True)  # (b, heads, local length, head dim)
        x = x + self.out(attended.transpose(0, 2, 1, 3).reshape(b, length, DIM))
        return x + self.fc_out(self.fc_in(self.ln2(x)).gelu())


class CharLM(nn.Module):
    def __init__(self, comm, vocab: int) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, DIM), nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList([Block(comm) for _ in range(BLOCKS)])
        self.ln, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, vocab)

    def forward(self, ids, positions):
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


# %%
# Data, the loss and one step's peak
# ----------------------------------
#
# Each batch is one row of characters; the model predicts each next one. A rank's loss is its sum over
# its positions divided by the full length, so that summing the ranks' gradients gives the gradient of the full
# mean. ``peak_of_a_step`` measures, with ``nbcoll.memory.stats()``, the most bytes alive at once during one
# forward and backward, over what was held before it.

text = load_text()
vocab = sorted(set(text))
codes = np.array([vocab.index(c) for c in text[: STEPS * (SEQ + 1)]], np.int64).reshape(STEPS, SEQ + 1)
batches = [(row[None, :-1], row[None, 1:]) for row in codes]  # predict each next character
SUM_LOSS = nn.CrossEntropyLoss(reduction="sum")


def build(group, recompute: bool) -> CharLM:
    nbcoll.manual_seed(0)  # the same weights on every rank and in every run
    model = CharLM(group, len(vocab))
    if recompute:
        for block in model.blocks:
            checkpoint_wrapper(block)  # keep the block's input only; backward runs its forward again
    return model


def loss_of(model, ids, targets, group, positions):
    """The mean loss over the *whole* sequence: this rank's sum divided by the full length. Summing the ranks'
    gradients then gives exactly the gradient of the full mean."""
    logits = model(ids, positions)
    return SUM_LOSS(logits.reshape(-1, len(vocab)), targets.reshape(-1)) * (1.0 / SEQ)


def peak_of_a_step(group, recompute: bool) -> int:
    """The most bytes alive at once during one forward and backward, over what was held before it."""
    model = build(group, recompute)
    positions = zigzag_positions(SEQ, group.size, group.rank)
    ids, targets = (x[:, positions] for x in batches[0])
    gc.collect()
    memory.reset_peak_stats()
    before = memory.stats().allocated_bytes
    loss_of(model, ids, targets, group, positions[None]).backward()
    return memory.stats().peak_bytes - before


say(f"Tutorial 24 on the {nbcoll.get_backend()!r} backend, {n} ranks")
say(f"   a character model: {BLOCKS} blocks, width {DIM}, {HEADS} heads, a sequence of {SEQ} characters")
say()


# %%
# 1. Peak memory of one training step
# -----------------------------------
#
# The same step measured four ways: one rank with the whole sequence, with and without recomputation, and
# 4 ranks with ring attention, with and without it. The worst rank counts.

say("1. Peak memory of one training step (forward and backward), per rank")
solo = comm.split(rank)  # this rank alone: the whole sequence, as one process would train it
peaks = {}
for name, group, recompute in [
    ("one rank, whole sequence", solo, False),
    ("one rank, whole sequence, recomputation", solo, True),
    (f"{n} ranks, ring attention", comm, False),
    (f"{n} ranks, ring attention, recomputation", comm, True),
]:
    peaks[name] = max(everyone(peak_of_a_step(group, recompute)))  # the worst rank
    fits = "" if LIMIT is None else ("  fits" if peaks[name] <= LIMIT else "  over the limit")
    say(f"   {name:<44} {peaks[name]:>11,} bytes{fits}")
if LIMIT is not None:
    say(f"   the limit: {LIMIT:,} bytes per rank; only the last layout stays under it")
    assert [peak <= LIMIT for peak in peaks.values()] == [False, False, False, True], peaks
say("   recomputation drops what each block keeps for backward; the ring splits what is left, and attention's")
say(f"   scores, which no longer span the whole {SEQ} x {SEQ} square on any rank")
say()


# %%
# 2. The planner's choice
# -----------------------
#
# ``plan(spec, ranks, memory_limit=..., long_sequences=True)`` predicts every layout of the ranks, with
# context parallelism, sequence parallelism and recomputation among them, and keeps those under the limit;
# ``explain`` says what the survivors share.

say("2. The planner, told the limit: every layout of 1 and of 4 ranks, predicted")
# The planner's model is nbcoll's HybridLM of the same shape (its memory per rank counts the parameters,
# gradients and momentum too); the limit here covers those as well.
SPEC = ModelSpec(layers=BLOCKS, hidden=DIM, seq_len=SEQ, batch=1, heads=HEADS, vocab=len(vocab), bytes_per_value=8)
PLAN_LIMIT = LIMIT  # the same number of bytes, for everything a rank holds (none on the simulator)
for ranks in (1, n):
    for p in sorted(plan(SPEC, ranks, long_sequences=True), key=lambda p: p.memory_bytes, reverse=True):
        verdict = "" if PLAN_LIMIT is None else "  (under it)" if p.memory_bytes <= PLAN_LIMIT else "  (over it)"
        say(f"   {ranks} rank{'s' * (ranks > 1)}  {str(p.layout):<36} {p.memory_bytes:>11,} bytes{verdict}")
chosen = plan(SPEC, n, memory_limit=PLAN_LIMIT, long_sequences=True)
say(textwrap.fill(explain(chosen, PLAN_LIMIT), 100, initial_indent="   ", subsequent_indent="   "))
if PLAN_LIMIT is not None:
    assert chosen[0].layout == Layout(1, 1, 1, 1, cp=n, recompute=True), chosen[0].layout
say("   the layout trained below: ring attention over every rank, each block recomputed")
say()


# %%
# 3. The ring's steps
# -------------------
#
# Which key/value block each rank attends to at each step of the ring, and how much of it the causal mask
# keeps. The zig-zag layout gives every rank early and late positions, so every rank does the same work.

say("3. The ring's steps: which key/value block each rank attends to, and how much of it the causal mask keeps")
say(f"   (zig-zag: rank r holds chunks r and {2 * n - 1}-r of {2 * n}, so every rank has early and late positions)")
visible = np.zeros((n, n))  # (rank, step) -> the share of the visiting block's scores the causal mask keeps
for r in range(n):
    mine = zigzag_positions(SEQ, n, r)
    for step in range(n):
        theirs = zigzag_positions(SEQ, n, (r - step) % n)
        visible[r, step] = (mine[:, None] >= theirs[None, :]).mean()
for r in range(n):
    cells = "  ".join(f"rank {(r - s) % n}: {visible[r, s]:4.0%}" for s in range(n))
    say(f"   rank {r} sees   {cells}")
say("   at every step each rank attends to half of the block it holds (of its own, the triangle and diagonal): the")
say("   same work everywhere, so no rank waits for another; without the zig-zag, rank 0 would skip most blocks")


# %%
# Drawing the ring
# ----------------
#
# Rank 0 draws the table above as ``ring_steps.png`` (not on the simulator).

# $NBCOLL_FIGURES_DIR (the docs build sets it) is the default folder; else a temporary one, removed at the end
kept = args.out or os.environ.get("NBCOLL_FIGURES_DIR")
out = kept or tempfile.mkdtemp(prefix="nbcoll_tutorial_24_")
if rank == 0 and not TINY:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.imshow(visible, cmap="Blues", vmin=0, vmax=1)
    for r in range(n):
        for s in range(n):
            ax.text(s, r, f"block {(r - s) % n}\n{visible[r, s]:.0%}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(n), [f"step {s}" for s in range(n)])
    ax.set_yticks(range(n), [f"rank {r}" for r in range(n)])
    ax.set_title("Ring attention, causal, zig-zag: the visiting block and the share of it kept")
    fig.tight_layout()
    path = os.path.join(out, "ring_steps.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    where = path if args.out else "ring_steps.png" + ("" if kept else " (in a temporary folder; --out DIR keeps it)")
    say(f"   drawn: {where}")
say()


# %%
# 4. Training against one process
# -------------------------------
#
# Ring attention with recomputation on 4 ranks, and one process on the whole sequence, from the same
# weights and on the same batches: the losses and every parameter agree.

say(f"4. Training {STEPS} steps with ring attention and recomputation, against one process on the whole sequence")
reference, split = build(solo, recompute=False), build(comm, recompute=True)
optimizers = [nbcoll.optim.SGD(m.parameters(), lr=0.5, momentum=0.9) for m in (reference, split)]
mine = zigzag_positions(SEQ, n, rank)
everything = np.arange(SEQ)
for step, (ids, targets) in enumerate(batches):
    for opt in optimizers:
        opt.zero_grad()
    want = loss_of(reference, ids, targets, solo, everything[None])
    want.backward()
    local_loss = loss_of(split, ids[:, mine], targets[:, mine], comm, mine[None])
    local_loss.backward()
    all_reduce_shared_gradients(split, comm)  # every parameter is shared: sum the ranks' gradients
    total = nbcoll.zeros(1, np.float64)
    comm.all_reduce(nbcoll.to_device(np.array([local_loss.item()])), total)
    got = float(nbcoll.to_host(total)[0])
    for opt in optimizers:
        opt.step()
    assert abs(got - want.item()) < 1e-10, (got, want.item())
    say(f"   step {step}: loss {got:.10f}  (one process: {want.item():.10f})")
worst = max(
    float(np.abs(a - b).max())
    for a, b in zip(split.state_dict().values(), reference.state_dict().values(), strict=True)
)
assert worst < 1e-10, worst
say(f"   every parameter equals one process's after {STEPS} steps (largest difference {worst:.1e})")
chunk = SEQ // (2 * n)
say(f"   (each rank feeds the model its own positions: rank 0 holds 0..{chunk - 1} and {SEQ - chunk}..{SEQ - 1})")


# %%
# Done
# ----
#
# The communicators are destroyed, and the drawing's temporary folder removed.

solo.destroy()
comm.destroy()
if not kept:
    shutil.rmtree(out, ignore_errors=True)
say()
ratio = peaks["one rank, whole sequence"] / peaks[f"{n} ranks, ring attention, recomputation"]
say(f"Done: the split model trains as one process does, each rank holding 1/{ratio:.0f} of the memory one needs alone.")
