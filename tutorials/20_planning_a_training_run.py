"""
Planning a training run
=======================

Predict every layout of 4 ranks, run a few, compare, then train the chosen one.

What you learn here:

- what a training step costs under each ``dp x tp x pp`` layout: every block's compute (a measured FLOP rate and
  fixed cost per block), the first stage's embedding, the last stage's norm, head and loss, the optimizer's
  update, the pipeline bubble, each collective (the communicator's alpha-beta model, plus the fixed cost of a
  call and the wait for a tensor-parallel partner), and, on this machine, the ranks taking turns on fewer CPU
  cores than ranks;
- how to measure those costs: ``measure_costs(spec, comm)`` times them on all ranks at once, under the load the
  run will meet (``benchmarks/plan_fit.py`` calls the same function);
- how the planner ranks layouts and says why the best one wins (``python -m nbcoll plan`` prints the same);
- how far the prediction is from a measured step, for a few layouts (``benchmarks/plan_fit.py`` runs them all);
- a 4-rank run on the 3-D mesh (``DeviceMesh(comm, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))``) in the
  layout the planner ranks first among those that combine two dimensions (with 4 ranks one size is 1), trained a
  few steps (a loss that falls).

Run it with ``python tutorials/20_planning_a_training_run.py``: it re-launches itself on 4 ranks. On the
simulator (``NBCOLL_BACKEND=sim``), where every GPU thread runs in Python, it keeps to toy sizes: a two-block
model of width 4, NumPy's default compute rates instead of a timing (only the calls are timed), one measured
layout, two steps.

Without a GPU, its tests and the docs build run it at full size with ``NBCOLL_BACKEND=numpy``.
"""

# %%
# Set-up
# ------
#
# The model's shape comes first (``ModelSpec``: layers, width, sequence, batch, heads, vocabulary, 8-byte
# values), toy sizes on the simulator. ``relaunch(4)`` then starts this script on 4 ranks and prints each rank's
# output after a ``[rank r]`` line. All 4 ranks time and train together; only rank 0 prints (``say``), and ranks
# 1-3, which print nothing, are reported by ``relaunch`` as ``(printed nothing: ...)`` at the end.

import nbcoll.launch
from nbcoll.backend import get_backend
from nbcoll.parallel.plan import ModelSpec

TINY = get_backend() == "sim"
if TINY:
    SPEC = ModelSpec(layers=2, hidden=4, seq_len=2, batch=4, heads=2, vocab=4, bytes_per_value=8)
else:
    SPEC = ModelSpec(layers=4, hidden=32, seq_len=16, batch=16, heads=4, vocab=32, bytes_per_value=8)
STEPS = 2 if TINY else 6
nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import os  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll.parallel.hybrid import HybridLM  # noqa: E402
from nbcoll.parallel.plan import Layout, default_rates, explain, format_plan, measure_costs, plan  # noqa: E402

nbcoll.set_default_dtype(np.float64)
comm = nbcoll.init()
rank = comm.rank


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


say(f"Tutorial 20 on the {nbcoll.get_backend()!r} backend, {comm.size} ranks")
say("\n".join(textwrap.wrap(f"the model: {SPEC}", 96, subsequent_indent="   ")))
say()

# %%
# 1. The costs
# ------------
#
# ``measure_costs`` times the pieces of a training step on all 4 ranks at once, so under the load the runs will
# meet. Each rank had only a share of a core, so the times are scaled to a rank with a core of its own; the
# planner knows how many cores the ranks share. The lines are the costs the planner reads:
#
# - a block's forward and backward: a FLOP rate (the slope between two sizes of micro-batch) plus a fixed cost.
#   At these small sizes the fixed cost dominates; when the slope is lost in the noise of a busy machine, the
#   rate comes out at its cap (thousands of GFLOP/s) and the block's time is all fixed cost;
# - the first stage's embedding, the last stage's norm, head and loss, and the optimizer's update;
# - a collective call's fixed cost beyond the communicator's alpha-beta model, and, after a block's compute, the
#   wait for a tensor-parallel partner that shares the cores.
#
# On the simulator, NumPy's default compute rates stand in for a timing, and only the calls are timed.

say("1. The costs, timed on the 4 ranks at once, and the plan")
# All ranks time the pieces of a step together, so under the load the runs will meet; each rank had a share of a
# core, so the times are scaled to a rank with a core of its own (the planner knows the ranks share the cores).
cores = os.cpu_count()
if TINY:  # a block's forward takes seconds on the simulator: NumPy's compute rates stand in, only calls are timed
    rates = measure_costs(SPEC, comm, cores=cores, busy=0.0, compute=default_rates(), partner_wait=False)
else:
    rates = measure_costs(SPEC, comm, cores=cores, busy=0.4)
ms = 1e3  # the costs below in milliseconds
say("   compute: NumPy's defaults, not timed on the simulator" if TINY else "   rank 0's figures, for a core per rank:")
say(f"   a block, forward + backward   {rates.flops_per_second / 1e9:.2f} GFLOP/s + {rates.block_overhead * ms:.2f} ms")
say(f"   embedding (first stage)       {rates.embed_overhead * ms:.2f} ms")
say(f"   norm, head, loss (last stage) {rates.head_overhead * ms:.2f} ms beyond their FLOPs")
say(f"   optimizer update              {rates.update_overhead * ms:.2f} ms per block")
say(f"   a collective call             {rates.call_latency * ms:.2f} ms beyond the alpha-beta model")
say(f"   an all-reduce after a block   {rates.partner_wait * ms:.2f} ms more: the partner waits for a core")
say(f"   the {comm.size} ranks share {rates.cores} CPU cores")

# %%
# The plan
# --------
#
# ``plan`` predicts one step for every layout of 4 ranks: ``dp x tp x pp`` with ``m`` micro-batches for the
# pipeline, and ranks them, fastest first. The table shows the six fastest, with the parts of each step: compute,
# the pipeline's bubble, the three kinds of communication, and the memory per rank. The line under it says why
# the first layout wins over the second (``python -m nbcoll plan`` prints the same); ``clauses`` cuts that long
# line between its clauses, to fit a page.


def clauses(text: str, width: int = 96) -> list[str]:
    """``text`` cut into lines of at most about ``width`` characters, each break after a ": " or a "; "."""
    pieces = re.split(r"(?<=[:;]) ", text)
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


predictions = plan(SPEC, comm.size, rates)
for line in format_plan(predictions, top=6).splitlines():
    say("   " + "\n     ".join(clauses(line)))
say()

# %%
# 2. Predicted against measured
# -----------------------------
#
# Four layouts (data parallel alone, two mixes, pipeline parallel alone; one mix on the simulator), each run for a
# few steps by ``HybridLM``: the median step, after a first one that warms up, against the prediction. The error
# is the distance between the two, relative to the measured step. ``benchmarks/plan_fit.py`` runs every layout.

chosen = [Layout(4, 1, 1, 1), Layout(2, 2, 1, 1), Layout(2, 1, 2, 2), Layout(1, 1, 4, 4)]
if TINY:
    chosen = [Layout(2, 2, 1, 1)]
say(f"2. Predicted against measured, for {len(chosen)} layout{'s' if len(chosen) > 1 else ''}")
rng = np.random.default_rng(0)
batches = [rng.integers(0, SPEC.vocab, (SPEC.batch, SPEC.seq_len)) for _ in range(2 if TINY else 4)]
errors = []
for layout in chosen:
    run = HybridLM(SPEC, comm, layout)
    times = []
    for ids in batches:
        comm.barrier()
        start = time.perf_counter()
        run.step(ids, np.roll(ids, -1, axis=1))
        comm.barrier()
        times.append(time.perf_counter() - start)
    run.destroy()
    measured = statistics.median(times[1:])  # the first step warms up
    predicted = next(p for p in predictions if p.layout == layout).step_seconds
    errors.append(abs(predicted - measured) / measured)
    say(f"   {str(layout):<22} predicted {predicted * 1e3:7.1f} ms, measured {measured * 1e3:7.1f} ms")
say(f"   median error {statistics.median(errors):.0%} (a 2-core machine shared with other work is a noisy clock)")
if TINY:
    say("   (on the simulator every GPU thread runs in Python: the rates above do not describe it)")
say()

# %%
# 3. A hybrid run on the 3-D mesh
# -------------------------------
#
# ``DeviceMesh(comm, (pp, dp, tp), mesh_dim_names=...)`` lays the ranks out on all three dimensions at once;
# with 4 ranks at least one of the three sizes is 1 (2 x 2 x 2 needs 8 ranks), so a 4-rank run combines two of
# them. The planner picks which: its best layout among those of sizes 1, 2 and 2. The mesh's sizes also name a
# ``cp`` dimension (context parallelism, size 1 here), and rank 0's coordinates on each. A few steps of training
# on one batch: look for a loss that falls. The last line repeats why the planner's first layout wins.
hybrids = [p for p in predictions if sorted((p.layout.dp, p.layout.tp, p.layout.pp)) == [1, 2, 2]]
chosen_layout = hybrids[0].layout  # the planner's ranking, fastest first
say(f"3. A hybrid run on the 3-D mesh, {chosen_layout}: the planner's best layout that combines")
say(f"   two dimensions (its fastest overall is {predictions[0].layout}; with 4 ranks one of dp, tp, pp")
say("   is 1, since 2 x 2 x 2 needs 8 ranks)")
run = HybridLM(SPEC, comm, chosen_layout, lr=0.05)  # a (pp, dp, tp) DeviceMesh inside
sizes = dict(zip(run.mesh.mesh_dim_names, run.mesh.shape, strict=True))
say(f"   mesh sizes {sizes}; {STEPS} steps")
say(f"   rank 0 sits at {run.mesh.coords}")
ids = rng.integers(0, SPEC.vocab, (SPEC.batch, SPEC.seq_len))
losses = [run.step(ids, np.roll(ids, -1, axis=1)) for _ in range(STEPS)]
run.destroy()
say("   loss " + " ".join(f"{loss:.3f}" for loss in losses))
assert losses[-1] < losses[0], losses
comm.destroy()
say()
say("\n   ".join(clauses(f"Done: {explain(predictions)}")))
