"""
Mixture of experts across ranks
===============================

Top-k gating, capacity, dropped tokens, and the two all-to-alls that move them.

What you learn here:

- how a gate sends each token to its ``top_k`` experts, and how a capacity (``capacity_factor`` times an even
  share) bounds every expert's work; what does not fit is dropped, and counted;
- how experts on different ranks get their tokens: first an all-to-all of *counts*, so every rank knows how many
  rows it will receive from whom, then an uneven all-to-all of the rows, and the reverse one to bring results home;
- that the layer spread over ranks computes exactly what it computes with every expert local, token for token;
- the load-balancing loss, which is smallest when the gate spreads tokens evenly.

Run it with ``python tutorials/19_experts_and_all_to_all.py``: it re-launches itself on 2 ranks, in float64. On
the simulator (``NBCOLL_BACKEND=sim``), where every GPU thread runs in Python, it runs the same steps at toy sizes:
one expert per rank, width 2, 6 tokens per rank, two training steps.

Without a GPU, its tests and the docs build run it at full size with ``NBCOLL_BACKEND=numpy``.
"""

# %%
# Set-up
# ------
#
# ``relaunch(2)`` starts this script on 2 ranks and prints each rank's output after a ``[rank r]`` line.
# Everything runs in float64. Rank 0 prints every step (``say``); rank 1 runs the same steps with its own tokens
# and its own experts and prints nothing, which ``relaunch`` reports as ``(printed nothing: ...)`` at the end.

import nbcoll.launch

nbcoll.launch.relaunch(2)

# Everything below runs on each of the 2 ranks.
import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import nn  # noqa: E402
from nbcoll.parallel.experts import MixtureOfExperts, all_reduce_shared_gradients, load_expert_state  # noqa: E402

nbcoll.set_default_dtype(np.float64)
comm = nbcoll.init()
rank, n = comm.rank, comm.size
TINY = nbcoll.get_backend() == "sim"
EXPERTS, DIM, HIDDEN, TOKENS, STEPS = (n, 2, 2, 6, 2) if TINY else (4, 8, 16, 12, 6)

# %%
# Who prints, and the tokens
# --------------------------
#
# ``everyone`` all-gathers a list of ints from every rank, so that rank 0 can print both ranks' numbers (a
# collective: both ranks call it). ``solo`` is a group of one rank: a layer built on it keeps every expert
# local, the reference that the spread layer must match. Each rank draws its own tokens.


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


def everyone(values: list[int]) -> list[list[int]]:
    """Each rank's list of ints (same length everywhere), for rank 0 to print."""
    got = nbcoll.zeros(n * len(values), np.int64)
    comm.all_gather(nbcoll.to_device(np.array(values, np.int64)), got)
    return nbcoll.to_host(got).reshape(n, -1).tolist()


say(f"Tutorial 19 on the {nbcoll.get_backend()!r} backend, {n} ranks, {EXPERTS} experts ({EXPERTS // n} per rank)")
say()
solo = comm.split(rank)  # this rank alone: a layer with every expert local, the reference
x = nbcoll.tensor(np.random.default_rng([1, rank]).standard_normal((TOKENS, DIM)))  # each rank's own tokens

# %%
# 1. Routing
# ----------
#
# The gate scores every token for every expert; each token goes to its 2 best experts (``top_k=2``), so each
# rank has twice as many assignments as tokens. An expert takes at most ``capacity`` rows from each rank,
# ``ceil(capacity_factor x tokens x top_k / experts)``, first choices served before second choices; an assignment
# past capacity is dropped: it adds nothing to the token's output. Both layers get the same weights
# (``load_expert_state`` gives each rank the experts it holds); ``spread.stats`` counts what happened. Look at
# each rank's rows per expert: at most the capacity each, and what did not fit, dropped.

say("1. Routing: top-2 experts per token, capacity factor 1.0")
nbcoll.manual_seed(0)
local = MixtureOfExperts(DIM, HIDDEN, EXPERTS, solo, top_k=2, capacity_factor=1.0)
spread = load_expert_state(
    MixtureOfExperts(DIM, HIDDEN, EXPERTS, comm, top_k=2, capacity_factor=1.0), local.state_dict(), comm
)
y_local, y_spread = local(x), spread(x)
stats = spread.stats
say(f"   capacity per expert: ceil(1.0 x {TOKENS} tokens x 2 / {EXPERTS}) = {stats['capacity']} rows from each rank")
for r, (tokens_per_expert, dropped) in enumerate(
    zip(everyone(stats["per_expert"]), everyone([stats["dropped"]]), strict=True)
):
    say(f"   rank {r}: rows kept per expert {tokens_per_expert}, assignments dropped {dropped[0]}")
say()

# %%
# 2. The all-to-alls
# ------------------
#
# The forward above moved the tokens twice. First an all-to-all of *counts*: each rank tells every other how
# many rows it will send to each of its experts, so that every rank knows how much it will receive from whom.
# Then an uneven all-to-all of the rows themselves; the experts run on the rows from both ranks at once, and the
# reverse all-to-all brings the results home. The spread layer must equal the local one exactly (both ranks
# check theirs; rank 0 prints its difference).

say("2. The all-to-alls")
say("   counts first: each rank tells each expert's rank how many rows to expect;")
say("   then the rows themselves")
worst = np.abs(y_spread.numpy() - y_local.numpy()).max()
assert worst < 1e-12, worst  # on every rank
say(f"   max |spread - local| over rank 0's token outputs: {worst:.1e} (every expert local is the reference)")
say()

# %%
# 3. Capacity too small
# ---------------------
#
# With ``capacity_factor=0.5`` each expert takes 3 rows from each rank: at full size, 4 experts x 3 = 12 of a
# rank's 24 assignments fit, and the other 12 are dropped. The layer still runs; the drops are counted in
# ``stats``.

say("3. Capacity too small: drops are counted, never silent")
tight = load_expert_state(
    MixtureOfExperts(DIM, HIDDEN, EXPERTS, comm, top_k=2, capacity_factor=0.5), local.state_dict(), comm
)
tight(x)
say(
    f"   capacity factor 0.5: capacity {tight.stats['capacity']}, dropped per rank {everyone([tight.stats['dropped']])}"
)
say()

# %%
# 4. Training with the load-balancing loss
# ----------------------------------------
#
# A few SGD steps on a regression, with the Switch Transformer's load-balancing loss added: ``aux_loss`` is
# ``num_experts x sum_e f_e P_e`` (``f_e`` the share of tokens whose first choice is expert ``e``, ``P_e`` their
# mean gate probability); it is 1.0 when the tokens are spread evenly and larger when the gate favours some
# experts. Each expert exists once, so its gradient is complete after backward; the gate is replicated, so its
# gradient is all-reduced as in data parallelism. Look for both losses falling, the balance loss slowly toward
# 1.0.

say("4. Training with the load-balancing loss")
opt = nbcoll.optim.SGD(spread.parameters(), lr=0.2)
mse = nn.MSELoss()
target = nbcoll.tensor(np.random.default_rng([2, rank]).standard_normal((TOKENS, DIM)))
for step in range(STEPS):
    opt.zero_grad()
    y = spread(x)
    loss = mse(x + y, target) + 0.1 * spread.aux_loss
    (loss * (1.0 / n)).backward()  # each expert's gradient sums every rank's tokens
    all_reduce_shared_gradients(spread, comm)  # the replicated gate averages like data parallelism
    opt.step()
    say(f"   step {step}: loss {loss.item():.4f}, balance loss {spread.aux_loss.item():.4f} (1.0 is perfectly even)")
solo.destroy()
comm.destroy()
say()
say("Done: experts on different ranks, tokens moved by all-to-all, equal to the local layer's outputs.")
