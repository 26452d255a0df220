"""Data parallelism: from DataParallel by hand to DistributedDataParallel with buckets that overlap backward.

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

Run it with ``python tutorials/13_data_parallel.py [--out DIR]``: it re-launches itself on 4 ranks.
"""

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
print(f"Tutorial 13 on the {nbcoll.get_backend()!r} backend: rank {rank} of {n}")
print()


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


# ---------------------------------------------------------------------------------------------------------------
# 1. DataParallel by hand. Rank 0 owns the weights and the batch; every collective is an autograd Function.
#
#    forward:  W_r = broadcast(W)   x_r = scatter(x)   y_r = x_r @ W_r^T   y = gather(y_r)   loss on rank 0
#    backward: dy_r = scatter(dy)   dW_r = dy_r^T x_r  dW = reduce(dW_r): the sum of every rank's part
print("1. DataParallel by hand: broadcast the weights, scatter the batch, gather the outputs")
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
    print(f"   the weight's gradient on rank 0 equals one process's: largest difference {error:.1e}")
else:
    print(f"   rank {rank} ran the duals (scatter of dy, reduce of dW); its own weight's gradient is 0")
print()

# ---------------------------------------------------------------------------------------------------------------
# 2. Data parallelism: every rank holds the model and computes the gradient of its own rows. The mean over the
#    ranks of their gradients is the gradient of the mean loss over the global batch.
print("2. naive data parallelism: one all-reduce per parameter, after backward")
model = make_model()
nn.MSELoss()(model(nbcoll.tensor(x_global[my_rows])), nbcoll.tensor(y_global[my_rows])).backward()
comm.reset_counters()
for p in model.parameters():
    comm.all_reduce(p.grad.data, op="avg")
print(
    f"   {len(list(model.parameters()))} all-reduces, largest difference from one process: {largest_error(model):.1e}"
)
print()

# ---------------------------------------------------------------------------------------------------------------
# 3. Buckets: parameters grouped, in reverse registration order, into flat buffers of about bucket_cap_mb MiB.
#    Each all-reduce has a fixed cost, so fewer and larger ones are faster.
print("3. DistributedDataParallel: buckets")
for cap_mb in (25, 0.0003, 0):
    ddp = DistributedDataParallel(make_model(), comm, bucket_cap_mb=cap_mb)
    nn.MSELoss()(ddp(nbcoll.tensor(x_global[my_rows])), nbcoll.tensor(y_global[my_rows])).backward()
    launches = sum(1 for kind, _ in ddp.events if kind == "all_reduce")
    print(
        f"   bucket_cap_mb={cap_mb:<7g}: {len(ddp.buckets)} bucket(s) of {[len(b.params) for b in ddp.buckets]} "
        f"parameters, {launches} all-reduce(s), largest difference {largest_error(ddp.module):.1e}"
    )
print()

# ---------------------------------------------------------------------------------------------------------------
# 4. Overlap: the events of the last step (one parameter per bucket), in the order they happened, one column
#    each: g a gradient accumulated, L a bucket's all-reduce launched, d a hook finding one done, S all waited for.
#    A bucket's row runs from its launch (L) until it is seen done (|), while backward goes on.
print("4. overlap: when each bucket's all-reduce starts during backward")
symbol = {"gradient": "g", "all_reduce": "L", "all_reduce done": "d", "synchronized": "S"}
events = ddp.events
print("   events            " + "".join(symbol[kind] for kind, _ in events))
for bucket in ddp.buckets:
    start = events.index(("all_reduce", bucket.index))
    done = ("all_reduce done", bucket.index)
    end = events.index(done) if done in events else len(events) - 1
    row = "".join(
        "L" if t == start else "|" if t == end else "=" if start < t < end else " " for t in range(len(events))
    )
    print(f"   bucket {bucket.index} {bucket.names[0]:>8} {row}")
last_gradient = max(t for t, (kind, _) in enumerate(events) if kind == "gradient")
early = sum(1 for b in ddp.buckets if events.index(("all_reduce", b.index)) < last_gradient)
print(f"   {early} of {len(ddp.buckets)} all-reduces started before backward's last gradient")
print()

# ---------------------------------------------------------------------------------------------------------------
# 5. The same timeline as a picture: the x axis counts events, not seconds. The top row is backward producing
#    gradients; below it, one bar per bucket from its all-reduce's launch to the moment it is seen done.
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
    print(f"5. the picture: {path}")
    print()
print(f"Done: rank {rank} ok")
comm.destroy()
