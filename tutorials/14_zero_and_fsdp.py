"""
ZeRO and fully sharded training: memory per rank for stages 0 to 3
==================================================================

Measured, and held against the formulas of the ZeRO paper.

What you learn here:

- what data parallelism replicates: with float32 and Adam every rank holds 4 bytes of parameter, 4 of gradient
  and 8 of optimizer state per parameter, 16 bytes in all, whatever the number of ranks;
- ZeRO's three stages shard those 16 bytes: stage 1 the 8 of optimizer state, stage 2 also the 4 of gradient,
  stage 3 (fully_shard) all 16, each divided by the number of ranks;
- how to measure it: ``nbcoll.memory.stats()`` counts every array nbcoll allocates, on every backend;
- that all four train the same model: the parameters after the steps agree with one process.

Run it with ``python tutorials/14_zero_and_fsdp.py [--out DIR]``: it re-launches itself on 4 ranks and draws
``memory_per_rank.png``.
"""

# %%
# Set-up
# ------
#
# ``relaunch(4)`` starts this script on 4 ranks and prints each rank's output after a ``[rank r]`` line. Here
# every rank prints: each measures its own memory, so each rank's lines are its own figures (they come out the
# same on all four, since every rank holds an equal share). The hidden layer has 61 units so that no number of
# ranks divides the rows evenly, and the shards need padding.

import nbcoll.launch

nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import argparse  # noqa: E402
import gc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import memory, nn, optim  # noqa: E402
from nbcoll.parallel import (  # noqa: E402
    DistributedDataParallel,
    ZeroRedundancyOptimizer,
    fully_shard,
    gathered_parameters,
)
from nbcoll.plotting import add_figures_option  # noqa: E402

parser = argparse.ArgumentParser()
add_figures_option(parser, "memory_per_rank.png")  # by default $NBCOLL_FIGURES_DIR (the docs build) or "."
args = parser.parse_args()
comm = nbcoll.init()
rank, n = comm.rank, comm.size
TOY = nbcoll.get_backend() == "sim"  # one Python thread per CUDA thread: keep it tiny
SIZES = (3, 5, 2) if TOY else (32, 61, 10)  # 61 hidden units: no rank count divides the rows evenly
STEPS = 1 if TOY else 3
print(f"Tutorial 14 on the {nbcoll.get_backend()!r} backend: rank {rank} of {n}")
print()

# %%
# The model, the batches and a memory count
# -----------------------------------------
#
# ``make_model`` builds the same two-layer float32 model on every rank from one seed. ``settled_bytes`` reads
# ``memory.stats().allocated_bytes``, the bytes of every array nbcoll holds right now, once the buffers of earlier
# operations are gone: the communicator keeps its last 32 operations' buffers, so a few barriers push them out.
# Every rank draws the same batches and trains on its own 4 rows of each. This cell prints nothing.


def make_model() -> nn.Module:
    nbcoll.manual_seed(0)
    i, h, o = SIZES
    return nn.Sequential(nn.Linear(i, h), nn.Tanh(), nn.Linear(h, o))  # float32, the default


def settled_bytes() -> int:
    """Bytes allocated once earlier operations' buffers are gone (the communicator remembers its last 32)."""
    for _ in range(40):
        comm.barrier()
    gc.collect()
    return memory.stats().allocated_bytes


rng = np.random.default_rng(0)
batches = [(rng.standard_normal((4 * n, SIZES[0])), rng.standard_normal((4 * n, SIZES[2]))) for _ in range(STEPS)]

# %%
# One training function for the four stages
# -----------------------------------------
#
# The stages differ only in how the model and the optimizer are wrapped:
#
# - stage 0 is plain data parallelism: ``DistributedDataParallel`` and an ordinary ``Adam``;
# - stages 1 and 2 keep DDP's model but shard the optimizer with ``ZeroRedundancyOptimizer`` (stage 2 also
#   reduce-scatters the gradients, so each rank keeps only its shard of them);
# - stage 3 is ``fully_shard``: the parameters themselves live as shards, all-gathered when a layer needs them.
#
# ``train`` returns the bytes the stage still holds after its steps (against the count before it began) and the
# full parameters, gathered from the shards for stage 3.


def train(stage: int) -> tuple[int, dict[str, np.ndarray]]:
    """STEPS Adam steps with this stage on this rank's rows; returns the bytes kept and the parameters."""
    before = settled_bytes()
    model = make_model()
    if stage < 2:
        model = DistributedDataParallel(model, comm)
    if stage == 3:
        model = fully_shard(model, comm)
    if stage in (0, 3):
        optimizer = optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optim.Adam, comm, stage=stage, lr=0.01)
    for x, y in batches:
        rows = slice(4 * rank, 4 * (rank + 1))
        optimizer.zero_grad()
        nn.MSELoss()(
            model(nbcoll.tensor(x[rows], dtype=np.float32)), nbcoll.tensor(y[rows], dtype=np.float32)
        ).backward()
        optimizer.step()
    kept = settled_bytes() - before
    if stage == 3:
        params = gathered_parameters(model)
    else:
        params = {k: v.numpy() for k, v in (model.module if stage < 2 else model).named_parameters()}
    return kept, params


# %%
# 1. The reference
# ----------------
#
# One process trains on the whole batch: the parameters every stage must reproduce. ``P`` is the number of
# parameters, the unit of the formulas below.

reference = make_model()
reference_optimizer = optim.Adam(reference.parameters(), lr=0.01)
for x, y in batches:
    reference_optimizer.zero_grad()
    nn.MSELoss()(reference(nbcoll.tensor(x, dtype=np.float32)), nbcoll.tensor(y, dtype=np.float32)).backward()
    reference_optimizer.step()
want = {k: v.numpy() for k, v in reference.named_parameters()}
P = sum(v.size for v in want.values())
print(f"1. the model: {SIZES[0]} -> {SIZES[1]} -> {SIZES[2]}, {P} float32 parameters, Adam, {n} ranks")
print()

# %%
# 2. Memory per rank, measured and by the formula
# -----------------------------------------------
#
# The ZeRO paper (Rajbhandari et al., 2020) counts the bytes per rank, for float32 with Adam::
#
#     stage 0: (4 + 4 + 8) P    stage 1: (4 + 4) P + 8 P/n    stage 2: 4 P + (4 + 8) P/n    stage 3: 16 P/n
#
# Each line gives the measured bytes, the formula's, and their ratio. Stage 0 matches exactly; the sharded
# stages measure a little more, since the shards are padded so that every rank's is the same size: stages 1
# and 2 pad one flat buffer of all the parameters, stage 3 pads the rows of every parameter to a multiple of
# the number of ranks, hence its larger ratio. The second line of each stage checks that it trained the same
# model: the largest difference from one process's parameters, relative to their size (float32 rounding,
# about 1e-7).

print("2. bytes per rank: measured with nbcoll.memory.stats(), and the formula")
formula = {0: 16 * P, 1: 8 * P + 8 * P / n, 2: 4 * P + 12 * P / n, 3: 16 * P / n}
measured = {}
for stage in range(4):
    measured[stage], params = train(stage)
    error = max(float(np.max(np.abs(params[k] - want[k])) / np.max(np.abs(want[k]))) for k in want)
    print(
        f"   stage {stage}: {measured[stage]:>7} B measured, {formula[stage]:>9.1f} B by the formula "
        f"({measured[stage] / formula[stage]:.3f} x: padding of the shards)"
    )
    print(f"            parameters match one process to {error:.1e}")
    assert error < 1e-5, f"stage {stage} trained another model: {error}"
print()

# %%
# 3. The picture
# --------------
#
# Rank 0 draws the measured bars beside the formula's, per stage, into ``memory_per_rank.png``; the other ranks
# skip it. Then every rank says it is done.

if rank == 0:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    stages = np.arange(4)
    axes.bar(stages - 0.2, [measured[s] for s in stages], width=0.4, label="measured (memory.stats)")
    axes.bar(stages + 0.2, [formula[s] for s in stages], width=0.4, label="ZeRO formula")
    axes.set_xticks(stages, ["0: DDP", "1: optimizer", "2: + gradients", "3: + parameters"])
    axes.set_ylabel("bytes per rank")
    axes.set_title(f"{P} float32 parameters with Adam on {n} ranks")
    axes.legend()
    path = Path(args.out) / "memory_per_rank.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    print(f"3. the plot: {path}")
    print()
print(f"Done: rank {rank} ok")
comm.destroy()
