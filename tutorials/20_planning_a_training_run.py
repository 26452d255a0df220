"""Planning a training run: predict every layout of 4 ranks, run a few, compare, then train the chosen one.

What you learn here:

- what a training step costs under each ``dp x tp x pp`` layout: compute (a measured rate and a per-block
  overhead), the pipeline bubble, each collective (the communicator's alpha-beta model), and, on this machine,
  the ranks taking turns on fewer CPU cores than ranks;
- how the planner ranks layouts and says why the best one wins (``python -m nbcoll plan`` prints the same);
- how far the prediction is from a measured step, for a few layouts (``benchmarks/plan_fit.py`` runs them all);
- a 4-rank hybrid run: tensor parallel inside pipeline stages, trained a few steps (a loss that falls).

Run it with ``python tutorials/20_planning_a_training_run.py``: it times one block first, then re-launches
itself on 4 ranks.

Without a GPU its tests and the docs build run it with ``NBCOLL_BACKEND=numpy``: the simulator runs every
kernel thread in Python, which is much slower at these sizes.
"""

import sys

import nbcoll.launch
from nbcoll.parallel.plan import ModelSpec, measure_rates

SPEC = ModelSpec(layers=4, hidden=32, seq_len=16, batch=16, heads=4, vocab=32, bytes_per_value=8)

if not nbcoll.launch.under_mpi():  # time a block alone, before the ranks share the machine
    rates = measure_rates(SPEC)
    sys.argv += [str(rates.flops_per_second), str(rates.block_overhead)]
nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import dataclasses  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll.parallel.hybrid import HybridLM  # noqa: E402
from nbcoll.parallel.plan import Layout, default_rates, explain, format_plan, measure_call_latency, plan  # noqa: E402

nbcoll.set_default_dtype(np.float64)
comm = nbcoll.init()
rank = comm.rank


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


say(f"Tutorial 20 on the {nbcoll.get_backend()!r} backend, {comm.size} ranks")
say(f"the model: {SPEC}")
say()

# ---------------------------------------------------------------------------------------------------------------
say("1. The plan")
rates = default_rates(cores=os.cpu_count())
# The launching process passed its timing; started under mpiexec directly, the defaults stand in.
flops, overhead = (float(sys.argv[-2]), float(sys.argv[-1])) if len(sys.argv) >= 3 else (2e9, 4e-3)
rates = dataclasses.replace(rates, flops_per_second=flops, block_overhead=overhead)
rates = dataclasses.replace(rates, call_latency=measure_call_latency(comm))  # pairs of ranks, all at once
say(f"   one block timed alone: {flops / 1e9:.2f} GFLOP/s and {overhead * 1e3:.1f} ms of fixed cost per forward")
say(f"   and backward; a collective call costs {rates.call_latency * 1e3:.2f} ms here (rank 0's figures)")
say(f"   the {comm.size} ranks share {rates.cores} CPU cores")
predictions = plan(SPEC, comm.size, rates)
for line in format_plan(predictions, top=6).splitlines():
    say("   " + line)
say()

# ---------------------------------------------------------------------------------------------------------------
say("2. Predicted against measured, for four layouts")
rng = np.random.default_rng(0)
batches = [rng.integers(0, SPEC.vocab, (SPEC.batch, SPEC.seq_len)) for _ in range(4)]
chosen = [Layout(4, 1, 1, 1), Layout(2, 2, 1, 1), Layout(2, 1, 2, 2), Layout(1, 1, 4, 4)]
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
say()

# ---------------------------------------------------------------------------------------------------------------
say("3. A hybrid run: tensor parallel (2) inside a 2-stage 1F1B pipeline, 6 steps")
run = HybridLM(SPEC, comm, Layout(dp=1, tp=2, pp=2, chunks=4), lr=0.05)
ids = rng.integers(0, SPEC.vocab, (SPEC.batch, SPEC.seq_len))
losses = [run.step(ids, np.roll(ids, -1, axis=1)) for _ in range(6)]
run.destroy()
say("   loss " + " ".join(f"{loss:.3f}" for loss in losses))
assert losses[-1] < losses[0], losses
comm.destroy()
say()
say(f"Done: {explain(predictions)}")
