"""
Tensor parallelism: a layer's matrices split across ranks, Megatron style
=========================================================================

And proven equal to one process.

What you learn here:

- how a column-parallel layer (each rank computes a slice of the output features) followed by a row-parallel
  layer (each rank multiplies its slice and the ranks add up) needs one all-reduce forward and one backward;
- Megatron's ``f`` (identity forward, all-reduce backward) and ``g`` (all-reduce forward, identity backward);
- how a vocabulary-parallel cross-entropy gets the loss of logits split over ranks without ever gathering them,
  and what that saves in memory (measured with ``nbcoll.memory.stats()``);
- how a transformer block splits by attention heads and MLP features, and that a few training steps of the split
  block give the same parameters as one process.

Run it with ``python tutorials/15_tensor_parallel.py``: it re-launches itself on 2 ranks, in float64. Rank 0
narrates; every rank runs the same steps and checks its results, and the other rank says so in one line. On the
simulator (``NBCOLL_BACKEND=sim``), where every GPU thread runs in Python, the same steps run at toy sizes (a few
features, one training step).

Without a GPU, its tests and the docs build run it at full size with ``NBCOLL_BACKEND=numpy``.
"""

# %%
# Set-up
# ------
#
# ``relaunch(2)`` starts this script on 2 ranks and prints each rank's output after a ``[rank r]`` line.
# Everything runs in float64, so that the split layers can be compared with the full ones to about 1e-16. Both
# ranks run every step; only rank 0 prints (``say``), and rank 1 adds one line at the end.

import nbcoll.launch

nbcoll.launch.relaunch(2)

# Everything below runs on each of the 2 ranks.
import gc  # noqa: E402

import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
import nbcoll.functional as F  # noqa: E402
from nbcoll import memory, nn  # noqa: E402
from nbcoll.parallel.tensor_parallel import (  # noqa: E402
    ColumnParallelLinear,
    RowParallelLinear,
    full_state_dict,
    load_full_state,
)
from nbcoll.parallel.tensor_parallel_transformer import tensor_parallel_block  # noqa: E402
from nbcoll.parallel.vocab_parallel import vocab_parallel_cross_entropy  # noqa: E402

nbcoll.set_default_dtype(np.float64)
comm = nbcoll.init()
rank, n = comm.rank, comm.size
TINY = nbcoll.get_backend() == "sim"
WIDTH, ROWS, VOCAB = (2, 4, 8) if TINY else (8, 64, 512)  # MLP input width; the loss's rows and vocabulary
DIM, HEADS, SEQ, STEPS = (4, 2, 2, 1) if TINY else (16, 4, 6, 3)  # the transformer block and its training


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


say(f"Tutorial 15 on the {nbcoll.get_backend()!r} backend, {n} ranks")
say()

# %%
# 1. An MLP split across ranks
# ----------------------------
#
# Every rank builds the same full MLP, ``y = gelu(x @ up.T) @ down.T``, from one seed; ``load_full_state`` then
# gives each rank its part. ``ColumnParallelLinear`` keeps rank ``r``'s rows of ``up``: the weights of its slice
# of the hidden features. ``RowParallelLinear`` keeps the matching columns of ``down``: the weights that read
# those features. The drawing shows who holds what. Each rank computes a partial ``y`` from its own features,
# and the ranks add them up; the text below the drawing names the two places where ranks communicate, Megatron's
# ``f`` and ``g``.

say("1. An MLP split across ranks: column parallel, then row parallel")
nbcoll.manual_seed(0)
up, down = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)  # every rank builds them alike (same seed)
col = load_full_state(ColumnParallelLinear(WIDTH, 2 * WIDTH, comm), up.state_dict(), comm)  # rank r's rows of up
row = RowParallelLinear(2 * WIDTH, WIDTH, comm, input_is_parallel=True)  # its input: col's split output
row = load_full_state(row, down.state_dict(), comm)  # its columns of down
hidden, per_rank = 2 * WIDTH, 2 * WIDTH // n
mine = f"{rank * per_rank}:{(rank + 1) * per_rank}"  # this rank's slice of the hidden features
say(f"   The MLP is y = gelu(x @ up.T) @ down.T, with {hidden} hidden features. Each rank holds a slice of them:")
say("   rank r holds the rows of up that compute its hidden features, the columns of down that read them.")
say()
spans = [f"{r * per_rank}:{(r + 1) * per_rank}" for r in range(n)]
up_box = [f"up {tuple(up.weight.shape)}, by rows", "+----------+"]
for r in range(n):
    up_box += [f"|  rank {r}  |  rows {spans[r]}", "+----------+"]
down_box = [f"down {tuple(down.weight.shape)}, by columns", "+" + "---------+" * n]
down_box += ["|" + "".join(f" rank {r}  |" for r in range(n)), "|" + "".join(f" {span:<8}|" for span in spans)]
down_box += ["+" + "---------+" * n]
for left, right in zip(up_box, down_box + [""] * (len(up_box) - len(down_box)), strict=True):
    say(f"     {left:<28}{right}".rstrip())
say()
say("   x --f--> rank r: h_r = gelu(x @ up[rows of r].T)")
say("                --> y_r = h_r @ down[:, columns of r].T --g--> y = sum of y_r")
say()
say("   f and g are the only communication, Megatron's two conjugate functions:")
say("     f: forward the identity (every rank needs all of x); backward an all-reduce, since each")
say("        rank's part of the network gives only a partial gradient of x")
say("     g: forward an all-reduce (y is the sum of the ranks' partial y_r); backward the identity")
say(f"   Here rank 0 holds up {tuple(col.weight.shape)} and down {tuple(row.weight.shape)}: half of each matrix.")

# %%
# The split MLP against the full one
# ----------------------------------
#
# The same input goes through the split layers and through the full ones. Forward, ``g``'s all-reduce adds the
# ranks' partial outputs; backward, ``f``'s all-reduce adds the ranks' partial gradients of ``x``. Look for
# differences of the order of 1e-16: float64 rounding, since the sums are taken in another order.

x = nbcoll.tensor(np.random.default_rng(1).standard_normal((4, WIDTH)), requires_grad=True)
y_split = row(col(x).gelu())  # f before col, g after row: one all-reduce each way
y_full = down(up(x).gelu())
output_difference = np.abs(y_split.numpy() - y_full.numpy()).max()
say(f"   forward, g's all-reduce: max |split - full| of y: {output_difference:.1e}")
y_split.sum().backward()
split_grad = x.grad.numpy().copy()
x.grad = None
y_full.sum().backward()
gradient_difference = np.abs(split_grad - x.grad.numpy()).max()
say(f"   backward, f's all-reduce: max |split - full| of x's gradient: {gradient_difference:.1e}")
assert output_difference < 1e-10 and gradient_difference < 1e-10, (output_difference, gradient_difference)
say()

# %%
# 2. Cross-entropy over a vocabulary split across ranks
# -----------------------------------------------------
#
# A language model's last layer, split by columns, leaves each rank the logits of its share of the vocabulary.
# ``vocab_parallel_cross_entropy`` computes the loss without gathering them: the ranks all-reduce only a few
# numbers per row (the maximum, the sum of exponentials, the target's logit). ``peak_of_loss`` measures the
# peak bytes that the loss and its backward allocate, with ``memory.reset_peak_stats()`` and
# ``memory.stats().peak_bytes``. For comparison the same function runs on the full logits in a group of one rank,
# ``comm.split(rank)``. Look for the same loss both ways, and a peak per rank about half the one-process peak.

say("2. Cross-entropy over a vocabulary split across ranks")
rows, vocab = ROWS, VOCAB
rng = np.random.default_rng(2)
logits, targets = rng.standard_normal((rows, vocab)), rng.integers(0, vocab, rows)
per = vocab // n
full_loss = F.cross_entropy(nbcoll.tensor(logits), targets).item()


def peak_of_loss(logits_part: np.ndarray, group) -> tuple[float, int]:
    x = nbcoll.tensor(np.ascontiguousarray(logits_part), requires_grad=True)
    gc.collect()
    memory.reset_peak_stats()
    before = memory.stats().allocated_bytes
    loss = vocab_parallel_cross_entropy(x, targets, group)
    loss.backward()
    return loss.item(), memory.stats().peak_bytes - before


solo = comm.split(rank)  # this rank alone: the same function on the full logits
_, one_process_peak = peak_of_loss(logits, solo)
split_loss, split_peak = peak_of_loss(logits[:, rank * per : (rank + 1) * per], comm)
solo.destroy()
say(f"   rank r holds the logits' columns [{per}r, {per}(r+1)) of {vocab}: the vocabulary is split, not the rows")
say(f"   loss {split_loss:.12f} split, {full_loss:.12f} full")
assert abs(split_loss - full_loss) < 1e-10, (split_loss, full_loss)
say(f"   peak memory of loss + backward: {split_peak} B per rank, {one_process_peak} B in one process")
say(f"   (the full logits alone are {rows * vocab * 8} B: only per-row numbers crossed the ranks)")
say()

# %%
# 3. A transformer block split by heads and MLP features
# ------------------------------------------------------
#
# ``tensor_parallel_block`` splits a ``TransformerBlock``: attention by heads (each rank computes its heads,
# and the output projection is row parallel), the MLP by features, as in section 1. The full block and the split
# one take the same SGD steps on the same inputs; ``full_state_dict`` then gathers the split parameters, and the
# largest relative difference over all of them should be of the order of 1e-16.
#
# The last lines: rank 0's ``Done``, then rank 1's one line, saying what it held and that its checks passed.

say(f"3. A transformer block split by heads and MLP features, trained {STEPS} step{'s' if STEPS > 1 else ''}")
nbcoll.manual_seed(3)
block = nn.TransformerBlock(DIM, num_heads=HEADS, causal=True)
split = tensor_parallel_block(block, comm)
features = f"{split.mlp.fc_in.weight.shape[0]} of {block.mlp.fc_in.weight.shape[0]} MLP features"
say(f"   each rank: {split.attn.local_heads} of {HEADS} heads, {features}")
optimizers = [nbcoll.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (block, split)]
for step in range(STEPS):
    x = nbcoll.tensor(np.random.default_rng([4, step]).standard_normal((2, SEQ, DIM)))
    for model, opt in zip((block, split), optimizers, strict=True):
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        opt.step()
gathered, want = full_state_dict(split, comm), block.state_dict()
worst = max(np.abs(gathered[k] - want[k]).max() / (np.abs(want[k]).max() + 1e-300) for k in want)
say(f"   after {STEPS} step(s), the largest relative difference over {len(want)} parameters: {worst:.1e}")
assert worst < 1e-10, worst
comm.destroy()
say()
say("Done: the split layers compute the full layers' results, and train to the same parameters.")
if rank != 0:
    print(
        f"rank {rank}: ran every step beside rank 0, holding features {mine} of the MLP and its share of the\n"
        f"vocabulary and heads, and passed the same checks (largest difference {max(worst, gradient_difference):.1e})"
    )
