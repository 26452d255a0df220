"""
Data parallelism: from DataParallel by hand to DistributedDataParallel
======================================================================

And DistributedDataParallel with buckets whose all-reduces overlap backward.

What you learn here:

- single-process DataParallel written with differentiable collectives: broadcast the weights, scatter the batch,
  gather the outputs. Backward runs the duals: the gradient of a broadcast is a reduce, so the root receives the
  sum of every rank's contribution;
- data parallelism as it is done today: every rank holds the model, computes the gradient of its own shard of
  the batch, and the ranks average their gradients with all-reduce (here first one all-reduce per parameter);
- buckets: fewer, larger all-reduces;
- overlap: each bucket's all-reduce starts the moment its last gradient is accumulated, while backward is still
  computing the earlier layers. The timeline at the end is drawn from the order of events, not from timing, as
  text and as a picture, ``bucket_timeline.png``.

Run it with ``python tutorials/13_data_parallel.py [--out DIR]``: it re-launches itself on 4 ranks. Every rank
runs every step; rank 0 prints, with the other ranks' numbers gathered into its lines, and each other rank adds
one line of its own.
"""

# %%
# Set-up
# ------
#
# ``relaunch(4)`` starts this same script on 4 ranks under ``mpiexec`` and prints each rank's output after a
# ``[rank r]`` line; everything after it runs on every rank. ``--out`` names the folder of the picture. On the
# simulator, where every GPU thread runs in Python, the model and the batch shrink to toy sizes.

import argparse
from pathlib import Path

import nbcoll.launch

nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import nn  # noqa: E402
from nbcoll.parallel import DistributedDataParallel  # noqa: E402
from nbcoll.parallel import functional as F  # noqa: E402
from nbcoll.plotting import add_figures_option  # noqa: E402

parser = argparse.ArgumentParser()
add_figures_option(parser, "bucket_timeline.png")  # by default $NBCOLL_FIGURES_DIR (the docs build) or "."
args = parser.parse_args()
comm = nbcoll.init()
rank, n = comm.rank, comm.size
TOY = nbcoll.get_backend() == "sim"  # the simulator runs one Python thread per CUDA thread: keep it tiny
IN, HIDDEN, OUT, ROWS = (3, 4, 2, 1) if TOY else (8, 16, 4, 4)  # ROWS: rows of the batch per rank

# %%
# Who prints
# ----------
#
# Every rank runs every step below, but only rank 0 prints them (``say``), so the output reads as one story.
# Where the other ranks' numbers matter, ``every_rank`` all-gathers them so that rank 0 can print them too: it
# is a collective, so every rank calls it, not just rank 0. Ranks 1-3 print one line each, at the very end.


def say(text: str = "") -> None:
    """Print on rank 0 only: every rank runs the same steps, and rank 0 tells them."""
    if rank == 0:
        print(text, flush=True)


def every_rank(values: list[float]) -> np.ndarray:
    """Each rank's ``values``, one row per rank, on every rank (an all-gather: every rank must call it)."""
    mine = nbcoll.to_device(np.asarray(values, np.float64))
    return nbcoll.to_host(comm.all_gather(mine, nbcoll.zeros(n * len(values), np.float64))).reshape(n, len(values))


say(f"Tutorial 13 on the {nbcoll.get_backend()!r} backend, {n} ranks")
say(f"(every rank runs the same steps; rank 0 prints them, with ranks 1-{n - 1}'s numbers gathered to it)")
say()
worst = 0.0  # this rank's largest difference from one process, over every step

# %%
# The model and the gradient to reproduce
# ---------------------------------------
#
# A small MLP in float64, built from the same seed on every rank, so every rank starts from the same weights. The
# global batch is the same on every rank too; rank ``r`` trains on its own ``ROWS`` rows of it. The reference
# is one process computing the gradient of the mean squared error over the whole batch: every version below
# must reproduce it, and ``largest_error`` measures how closely. This cell prints nothing.


def make_model() -> nn.Module:
    nbcoll.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN, HIDDEN, dtype=np.float64),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN, dtype=np.float64),
        nn.Tanh(),
        nn.Linear(HIDDEN, OUT, dtype=np.float64),
    )


rng = np.random.default_rng(0)  # the same global batch on every rank
x_global = rng.standard_normal((n * ROWS, IN))
y_global = rng.standard_normal((n * ROWS, OUT))
my_rows = slice(rank * ROWS, (rank + 1) * ROWS)

# The gradient every version below must reproduce: one process, the whole batch, the mean squared error.
reference = make_model()
nn.MSELoss()(reference(nbcoll.tensor(x_global)), nbcoll.tensor(y_global)).backward()
want = {name: p.grad.numpy() for name, p in reference.named_parameters()}


def largest_error(model: nn.Module) -> float:
    return max(float(np.max(np.abs(p.grad.numpy() - want[name]))) for name, p in model.named_parameters())


# %%
# 1. DataParallel by hand
# -----------------------
#
# Rank 0 owns the weights and the batch, as in PyTorch's single-process ``DataParallel``; every collective is an
# autograd ``Function`` from ``nbcoll.parallel.functional``, so backward runs each one's dual::
#
#     forward:  W_r = broadcast(W)   x_r = scatter(x)   y_r = x_r @ W_r^T   y = gather(y_r)   loss on rank 0
#     backward: dy_r = scatter(dy)   dW_r = dy_r^T x_r  dW = reduce(dW_r): the sum of every rank's part
#
# Look for a difference from one process's gradient of the order of 1e-16 (float64 rounding). The reduce sends
# the gradient to rank 0 only: the other ranks' own copies of the weight keep a gradient of zero.

say("1. DataParallel by hand: broadcast the weights, scatter the batch, gather the outputs")
layer = nn.Linear(IN, OUT, dtype=np.float64)
w = F.broadcast(layer.weight, comm, root=0)  # a differentiable copy of rank 0's weight on every rank
xs = F.scatter(nbcoll.tensor(x_global), comm, root=0)  # rows [rank*ROWS, (rank+1)*ROWS) of rank 0's batch
ys = F.gather(xs @ w.T, comm, root=0)  # every rank's outputs, stacked on rank 0 (zeros elsewhere)
target = nbcoll.tensor(y_global)
# Every rank must run backward through the same collectives; off the root the loss is 0 * (its zeros).
loss = ((ys - target) ** 2).mean() if rank == 0 else (ys * 0.0).sum()
loss.backward()
if rank == 0:
    one_process = nbcoll.tensor(layer.weight.numpy(), requires_grad=True)
    ((nbcoll.tensor(x_global) @ one_process.T - target) ** 2).mean().backward()
    error = np.max(np.abs(layer.weight.grad.numpy() - one_process.grad.numpy()))
    say(f"   the weight's gradient on rank 0 equals one process's: largest difference {error:.1e}")
    worst = max(worst, float(error))
zero = every_rank([float(np.abs(layer.weight.grad.numpy()).max())])[1:, 0]
say(f"   ranks 1-{n - 1} ran the duals (scatter of dy, reduce of dW); the reduce left their own weights'")
say(f"   gradients at zero: largest |gradient| per rank {zero.tolist()}")
say()

# %%
# 2. Naive data parallelism
# -------------------------
#
# Now every rank holds the whole model and computes the gradient of the loss on its own rows only. The mean
# over the ranks of their gradients is the gradient of the mean loss over the global batch, so one all-reduce
# with ``op="avg"`` per parameter, after backward, gives every rank the reference gradient. Look for the same
# tiny difference on all 4 ranks.

say("2. naive data parallelism: one all-reduce per parameter, after backward")
model = make_model()
nn.MSELoss()(model(nbcoll.tensor(x_global[my_rows])), nbcoll.tensor(y_global[my_rows])).backward()
comm.reset_counters()
for p in model.parameters():
    comm.all_reduce(p.grad.data, op="avg")
worst = max(worst, largest_error(model))
errors = every_rank([largest_error(model)])[:, 0]
say(f"   {len(list(model.parameters()))} all-reduces on each rank; largest difference from one process, per rank:")
say("   " + "  ".join(f"rank {r}: {e:.1e}" for r, e in enumerate(errors)))
say()

# %%
# 3. Buckets
# ----------
#
# ``DistributedDataParallel`` groups the parameters, in reverse registration order (the order backward produces
# their gradients), into flat buffers of about ``bucket_cap_mb`` MiB, and all-reduces each bucket once. Each
# all-reduce has a fixed cost, so fewer and larger ones are faster. Three caps: 25 MiB holds the whole model in
# one bucket, 0.0003 MiB (about 300 bytes) holds two parameters, and 0 gives each parameter a bucket of its own.
# Every cap must give the same gradients.

say("3. DistributedDataParallel: buckets")
say("   (the same on every rank; each difference is the largest over the ranks)")
for cap_mb in (25, 0.0003, 0):
    ddp = DistributedDataParallel(make_model(), comm, bucket_cap_mb=cap_mb)
    nn.MSELoss()(ddp(nbcoll.tensor(x_global[my_rows])), nbcoll.tensor(y_global[my_rows])).backward()
    launches = sum(1 for kind, _ in ddp.events if kind == "all_reduce")
    worst = max(worst, largest_error(ddp.module))
    error = every_rank([largest_error(ddp.module)]).max()
    say(
        f"   bucket_cap_mb={cap_mb:<7g}: {len(ddp.buckets)} bucket(s) of {[len(b.params) for b in ddp.buckets]} "
        f"parameters, {launches} all-reduce(s),"
    )
    say(" " * 26 + f"largest difference {error:.1e}")
say()

# %%
# 4. Overlap: the events of one step
# ----------------------------------
#
# DDP does not wait for backward to end: a hook on each parameter notes when its gradient is accumulated, and the
# moment a bucket's last gradient arrives, its all-reduce is launched, while backward goes on computing the
# earlier layers. ``ddp.events`` lists what the hooks saw, in order. Below, the events of the last step above
# (one parameter per bucket), one letter each, and one row per bucket from its launch (L) until it is seen done
# (``|``). Look for the L's before the last g: those all-reduces started while backward was still running.

say("4. overlap: when each bucket's all-reduce starts during backward (rank 0's last step)")
say("   ddp.events lists the events of DDP's hooks in the order they happened; one letter per event:")
say("     g  a parameter's gradient is accumulated (backward goes from the last layer to the first)")
say("     L  a bucket's all-reduce is launched: the last gradient it waited for has just come")
say("     d  a hook finds that an all-reduce launched earlier is done (when depends on the other ranks)")
say("     S  synchronize: the optimizer step waits until every bucket's averaged gradients are in place")
symbol = {"gradient": "g", "all_reduce": "L", "all_reduce done": "d", "synchronized": "S"}
events = ddp.events
event_string = "".join(symbol[kind] for kind, _ in events)
say("   Here each bucket holds one parameter, so each g is followed by its bucket's L. A bucket's row")
say("   runs from its launch (L) until seen done (|): its all-reduce is in flight while backward goes on.")
say("   events            " + event_string)
for bucket in ddp.buckets:
    start = events.index(("all_reduce", bucket.index))
    done = ("all_reduce done", bucket.index)
    end = events.index(done) if done in events else len(events) - 1
    row = "".join(
        "L" if t == start else "|" if t == end else "=" if start < t < end else " " for t in range(len(events))
    )
    say(f"   bucket {bucket.index} {bucket.names[0]:>8} {row}")
last_gradient = max(t for t, (kind, _) in enumerate(events) if kind == "gradient")
early = sum(1 for b in ddp.buckets if events.index(("all_reduce", b.index)) < last_gradient)
say(f"   {early} of {len(ddp.buckets)} all-reduces started before backward's last gradient")

# %%
# Every rank's events
# -------------------
#
# Each rank has a timeline of its own. To print them all, rank 0 gathers them: the event strings travel as
# letter codes padded with zeros, since an all-gather needs the same length on every rank. The g's and L's
# come in the same order everywhere; only the d's can move, since when a hook finds an all-reduce done depends
# on when the other ranks' parts arrive. A step can also show no d at all: then every bucket is first seen done
# at S.

# The other ranks' strings, as letter codes padded with zeros (an all-gather needs the same length everywhere).
codes = np.zeros(4 * len(ddp.buckets) + 2)
codes[: len(event_string)] = [ord(c) for c in event_string]
gathered = every_rank([early, *codes])
starts, strings = gathered[:, 0].astype(int), ["".join(chr(int(c)) for c in row if c) for row in gathered[:, 1:]]
say("   every rank's events (only the d's move: they depend on when the other ranks' parts arrive):")
for r, (text, count) in enumerate(zip(strings, starts, strict=True)):
    say(f"     rank {r}: {text:<{len(codes)}}  {count} of {len(ddp.buckets)} started before its last gradient")
say()

# %%
# 5. The timeline as a picture
# ----------------------------
#
# The same timeline, drawn by rank 0 into ``bucket_timeline.png``; the x axis counts events, not seconds. The
# top row is backward producing gradients; below it, one bar per bucket from its all-reduce's launch to the
# moment it is seen done. Then every rank says it is done: rank 0 with the largest difference it saw, the
# others with one line each, which ``relaunch`` prints after their ``[rank r]`` lines.

if rank == 0:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 0.5 * len(ddp.buckets) + 2))
    gradient_times = [t for t, (kind, _) in enumerate(events) if kind == "gradient"]
    axes.scatter(gradient_times, [0] * len(gradient_times), marker="v", color="black", label="gradient accumulated")
    for bucket in ddp.buckets:
        start = events.index(("all_reduce", bucket.index))
        done = ("all_reduce done", bucket.index)
        end = events.index(done) if done in events else len(events) - 1
        row = bucket.index + 1
        in_flight = "a bucket's all-reduce, from its launch (L) until seen done" if row == 1 else None
        axes.barh(row, max(end - start, 0.3), left=start, height=0.6, color="tab:blue", label=in_flight)
        axes.text(start, row, " L", va="center", color="white")
    synchronized = max(t for t, (kind, _) in enumerate(events) if kind == "synchronized")
    axes.axvline(synchronized, color="tab:red", linestyle="--", label="all buckets waited for")
    axes.axvline(last_gradient, color="gray", linestyle=":", label="backward's last gradient")
    axes.set_yticks(range(len(ddp.buckets) + 1), ["backward"] + [f"bucket {b.index} {b.names[0]}" for b in ddp.buckets])
    axes.invert_yaxis()
    axes.set_xlabel("event number (order of events, not time)")
    axes.set_title(f"DDP on {n} ranks: bucket all-reduces launch during backward")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize="small")
    path = Path(args.out) / "bucket_timeline.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    say(f"5. the picture: {path}")
    say()
    say("Try it yourself: python -m nbcoll exercise ddp_buckets")
    say(f"Done: rank 0 ok, largest difference from one process {worst:.1e}")
else:
    print(f"Done: rank {rank} ok: it ran the same steps as rank 0, which printed them; largest difference {worst:.1e}")
comm.destroy()
