"""
Pipeline parallelism: GPipe and 1F1B on 4 stages
================================================

Their timelines drawn, the bubble counted, the memory measured.

What you learn here:

- how a model cut into stages, one per rank, trains on micro-batches that flow forward and back through send and
  receive, and gives the same parameters as one process;
- the two classic orders of work: GPipe (all forwards, then all backwards) and 1F1B (one forward, one backward),
  and why each sends its sends together with its next receive (two neighbours send to each other at once);
- the bubble: the idle share of the timeline, counted from what each stage really ran, ``(p-1)/(m+p-1)`` for both;
- why 1F1B is used anyway: the first stage holds at most ``p`` micro-batches of activations instead of ``m``.

Run it with ``python tutorials/16_pipeline_parallel.py [--out DIR]``: it re-launches itself on 4 ranks and draws
the timelines into DIR (default: a temporary folder). On the simulator (``NBCOLL_BACKEND=sim``), where every GPU
thread runs in Python, it runs the same steps at toy sizes: width 2, 4 micro-batches of one row, one step.

Without a GPU, its tests and the docs build run it at full size with ``NBCOLL_BACKEND=numpy``.
"""

# %%
# Set-up
# ------
#
# ``relaunch(4)`` starts this script on 4 ranks, one pipeline stage each, and prints each rank's output after a
# ``[rank r]`` line. Only rank 0 prints (``say``); ranks 1-3 run their stages of every step in silence, which
# ``relaunch`` reports as ``(printed nothing: ...)`` under their ``[rank r]`` lines. ``--out`` names the folder
# of the two timeline pictures.

import nbcoll.launch

nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import argparse  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import nn  # noqa: E402
from nbcoll.parallel.pipeline_schedule import bubble_fraction, draw_timeline, timeline  # noqa: E402
from nbcoll.parallel.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="", help="folder for the timeline pictures")
args = parser.parse_args()
# NBCOLL_FIGURES_DIR, when set (the docs build sets it), is the default folder for the pictures.
# Otherwise a temporary folder, removed when the tutorial ends (--out keeps the pictures).
asked = args.out or os.environ.get("NBCOLL_FIGURES_DIR")
scratch = None if asked else tempfile.TemporaryDirectory(prefix="nbcoll-tutorial-16-")
out = asked or scratch.name

nbcoll.set_default_dtype(np.float64)
comm = nbcoll.init()
rank, p = comm.rank, comm.size
TINY = nbcoll.get_backend() == "sim"
WIDTH, BATCH, CHUNKS, STEPS = (2, 4, 4, 1) if TINY else (16, 64, 8, 3)
if rank == 0:
    os.makedirs(out, exist_ok=True)

# %%
# The stages and the batches
# --------------------------
#
# The model is 4 blocks of ``Linear`` + ``Tanh``, the last one with a ``Linear`` head of 4 classes. Every rank
# builds all 4 stages from one seed and keeps only its own, so the stages start from the weights of the one
# process below. The batches are the same on every rank; stage 0 reads the inputs, the last stage the targets.


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


def build_stages() -> list[nn.Module]:
    nbcoll.manual_seed(0)  # every rank builds every stage alike, then keeps its own
    stages = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(p)]
    stages[-1].append(nn.Linear(WIDTH, 4))
    return stages


say(f"Tutorial 16 on the {nbcoll.get_backend()!r} backend, {p} ranks = {p} stages")
say()
rng = np.random.default_rng(1)
batches = [(rng.standard_normal((BATCH, WIDTH)), rng.integers(0, 4, BATCH)) for _ in range(STEPS)]
loss_fn = nn.CrossEntropyLoss()

# %%
# 1. The reference
# ----------------
#
# One process trains the 4 stages as one ``Sequential`` on the whole batches, with plain SGD: the loss and the
# parameters that both schedules must reproduce.

say("1. One process trains the whole model, for reference")
reference = nn.Sequential(*build_stages())
opt = nbcoll.optim.SGD(reference.parameters(), lr=0.1)
for x, y in batches:
    opt.zero_grad()
    loss = loss_fn(reference(nbcoll.tensor(x)), nbcoll.tensor(y))
    loss.backward()
    opt.step()
say(f"   loss at the last step {loss.item():.6f}")
say()

# %%
# 2 and 3. GPipe, then 1F1B
# -------------------------
#
# Each rank wraps its stage in a ``PipelineStage``, and a schedule cuts every batch into ``m`` micro-batches that
# flow forward through the stages and back, by send and receive between neighbours. ``ScheduleGPipe`` runs all
# the forwards, then all the backwards; ``Schedule1F1B``, after a few forwards to fill the pipe, alternates one
# forward with one backward. For each schedule, look at:
#
# - the loss and the stage's parameters: equal to one process's, to rounding;
# - what stage 0 ran, in order: ``F3`` is the forward of micro-batch 3, ``B3`` its backward;
# - the bubble, the idle share of the timeline: counted from what every stage ran, it equals
#   ``(p-1)/(m+p-1)`` for both schedules;
# - the micro-batches in flight per stage (their activations kept for backward) and the peak bytes: GPipe keeps
#   all ``m`` on every stage, 1F1B at most ``p`` on the first and fewer further down. That is why 1F1B is used.
#
# Rank 0 draws each schedule's timeline: one row per stage, one box per forward or backward.

for section, (schedule, chunks) in enumerate([("gpipe", CHUNKS), ("1f1b", CHUNKS)], start=2):
    say(f"{section}. {schedule}, {chunks} micro-batches of {BATCH // chunks} rows")
    # PyTorch's names: this rank's part of the model is a PipelineStage, and a schedule runs its micro-batches.
    stage = PipelineStage(build_stages()[rank], stage_index=rank, num_stages=p, group=comm)
    pipe = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule](stage, n_microbatches=chunks, loss_fn=loss_fn)
    opt = nbcoll.optim.SGD(stage.submod.parameters(), lr=0.1)
    for x, y in batches:
        opt.zero_grad()
        pipe.step(x, target=y)  # inputs are read on stage 0, targets on the last stage
        loss = pipe.loss  # the batch's mean loss, on every rank
        opt.step()
    mine, want = stage.submod.state_dict(), reference[rank].state_dict()
    worst = max(np.abs(mine[k] - want[k]).max() for k in want)
    assert worst < 1e-12, worst
    say(f"   loss at the last step {loss:.6f}; stage parameters equal one process's (max difference {worst:.1e})")
    cells = timeline(pipe.gather_actions())  # what every stage ran, placed at the earliest possible time
    bubble = bubble_fraction(cells)
    say(f"   stage 0 ran: {' '.join(f'{kind}{i}' for _, kind, i in cells[0])}")
    say(f"   bubble counted from the timeline {bubble:.4f}; (p-1)/(m+p-1) = {(p - 1) / (chunks + p - 1):.4f}")
    held = nbcoll.zeros(p, np.int64)
    comm.all_gather(nbcoll.to_device(np.array([pipe.peak_in_flight], np.int64)), held)
    in_flight = nbcoll.to_host(held)
    comm.all_gather(nbcoll.to_device(np.array([pipe.peak_activation_bytes], np.int64)), held)
    say(f"   micro-batches in flight per stage: {in_flight.tolist()}; peak bytes {nbcoll.to_host(held).tolist()}")
    if rank == 0:
        say(f"   timeline: {draw_timeline(cells, os.path.join(out, f'{schedule}.png'), f'{schedule}, {p} stages')}")
    say()

comm.destroy()
say("Done: both schedules train as one process does, with the same bubble; 1F1B holds fewer activations.")
