"""
PyTorch on nbcoll
=================

torch.distributed's collectives, DistributedDataParallel and FSDP2 on nbcoll's communicators.

What you learn here:

- that ``import nbcoll.torch_backend`` registers ``"nbcoll"`` as a ``torch.distributed`` backend, and that
  ``init_process_group("nbcoll")`` gives a process group whose collectives run on an nbcoll communicator, the
  same rings, direct reads and shared-memory FIFOs the earlier tutorials build;
- that torch's own calls (``all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``, and any of them
  with ``async_op=True``) give gloo's results, and how to see what nbcoll ran underneath: the algorithm
  the tuner chose (in the communicator's flight recorder) and the bytes that crossed between the ranks (its
  traffic counters);
- that torch's own ``DistributedDataParallel``, unchanged, trains on ``"nbcoll"`` to gloo's parameters, and why
  its traffic is one all-reduce of the gradients per step;
- that FSDP2's ``fully_shard`` does too, with all-gathers of parameter shards and reduce-scatters of gradients,
  and what that costs next to DDP.

Run it with ``python tutorials/22_pytorch_on_nbcoll.py``: it re-launches itself on 2 ranks. It needs PyTorch
(``pip install torch``; without it the tutorial says so and stops). Its tensors are CPU tensors, which nbcoll
uses in place on the ``numpy`` backend: its tests and the docs build run it with ``NBCOLL_BACKEND=numpy``. On the
simulator every collective copies its tensors to the simulated device and back: the same results, more slowly.
"""

# %%
# Set-up
# ------
#
# Without PyTorch the tutorial says so and stops. Otherwise ``relaunch(2)`` starts it on 2 ranks and prints each
# rank's output after a ``[rank r]`` line. ``import nbcoll.torch_backend`` registers ``"nbcoll"`` with
# ``torch.distributed``, so ``init_process_group("nbcoll")`` makes it the default group; a second group of the
# same ranks on gloo, torch's own CPU backend, gives every result to compare with. Both ranks run every step;
# rank 0 prints, and rank 1, which prints nothing, is reported by ``relaunch`` as ``(printed nothing: ...)``.

import importlib.util
import sys

if importlib.util.find_spec("torch") is None:
    print("Tutorial 22 needs PyTorch (pip install torch), which is not installed here: nothing to run.")
    sys.exit(0)

import nbcoll.launch  # noqa: E402

nbcoll.launch.relaunch(2)

# Everything below runs on each of the 2 ranks.
import warnings  # noqa: E402
from collections import Counter  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import nbcoll  # noqa: E402
import nbcoll.torch_backend  # noqa: E402, F401  (registers "nbcoll" with torch.distributed)

# torch 2.13 renamed these two (all_gather_single, reduce_scatter_single); the old names, which older releases
# know too, run the same code and warn.
warnings.filterwarnings("ignore", "`torch.distributed.(all_gather_into|reduce_scatter)_tensor` is deprecated")

dist.init_process_group("nbcoll")  # under mpiexec: the ranks come from the MPI world
gloo = dist.new_group(backend="gloo")  # the same ranks on torch's own CPU backend, to compare with
rank, n = dist.get_rank(), dist.get_world_size()
group = dist.group.WORLD  # the default group: an nbcoll.torch_backend.ProcessGroupNbcoll
comm = group.comm  # ... and the nbcoll communicator its collectives run on
STEPS = 5

# %%
# What nbcoll ran
# ---------------
#
# The group's ``comm`` is an ordinary nbcoll communicator, so nbcoll's own tools see what torch asked of it: its
# flight recorder keeps an entry per collective, with its arguments and the algorithm the tuner chose
# (``ran``, ``ran_since``), and its traffic counters the bytes it sent. ``same`` compares two tensors to 1e-6.


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


def ran(name: str) -> str:
    """What nbcoll's flight recorder says the last ``name`` collective was: its call and the algorithm it ran."""
    return [e for e in comm.recorder.entries if e.op == name][-1].what


def ran_since(seq: int) -> list:
    """The flight recorder's entries of the collectives nbcoll ran after its entry ``seq``."""
    assert comm.recorder.count - seq <= len(comm.recorder.entries), "the recorder dropped some: NBCOLL_FLIGHT_RECORDER"
    return [e for e in comm.recorder.entries if e.seq > seq and " via " in e.what]


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


say(f"Tutorial 22 on the {nbcoll.get_backend()!r} backend, {n} ranks, torch {torch.__version__}")
say()

# %%
# 1. torch.distributed's collectives, next to gloo
# ------------------------------------------------
#
# Three of torch's collectives, each called twice: on the default group (``"nbcoll"``) and on the gloo group.
# ``on_both`` checks that the two agree, prints rank 0's result, and under it what nbcoll ran (from the flight
# recorder) and the bytes this rank sent. With 2 ranks each rank sends its peer exactly what the peer lacks, and
# at these sizes the tuner picks the ``direct`` algorithm.

say('1. torch.distributed\'s collectives on "nbcoll", next to gloo')
say(f"   dist.get_backend() = {dist.get_backend()!r}; the group is {type(group).__name__},")
say(f"   over {comm!r}")
say(f"   the gloo group of the same ranks: dist.get_backend(gloo) = {dist.get_backend(gloo)!r}")


def on_both(call) -> torch.Tensor:
    """``call(group)`` on nbcoll and on gloo, which must agree; say what nbcoll ran, and the bytes it sent."""
    comm.reset_counters()
    mine = call(None)  # group=None: the default group, "nbcoll"
    sent = comm.counters.bytes_sent
    same(mine, call(gloo))
    say(f"   {call.__name__:<23} {mine.tolist()} on both (rank 0's result)")
    collective = call.__name__.removesuffix("_into_tensor").removesuffix("_tensor")  # nbcoll's name of it
    say(f"      nbcoll ran {ran(collective)}: {sent} bytes sent")
    return mine


def all_reduce(g):
    t = torch.arange(5, dtype=torch.float32) * (rank + 1)  # rank r holds (r + 1) * [0, 1, 2, 3, 4]
    dist.all_reduce(t, group=g)
    return t


def all_gather_into_tensor(g):
    out = torch.zeros(n * 3, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.full((3,), 10 * rank + 1), group=g)  # rank r gives [10r + 1] * 3
    return out


def reduce_scatter_tensor(g):
    out = torch.zeros(3, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, torch.arange(n * 3, dtype=torch.float64) + rank, group=g)  # [r, r + 1, ...]
    return out


assert on_both(all_reduce).tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]
assert on_both(all_gather_into_tensor).tolist() == [1, 1, 1, 11, 11, 11]
assert on_both(reduce_scatter_tensor).tolist() == ([1.0, 3.0, 5.0] if rank == 0 else [7.0, 9.0, 11.0])
say("   each rank sends its peer what the peer lacks, once: the whole vector of the all-reduce")
say("   (20 bytes), its own block of the all-gather (3 x 8), its partial sums of the peer's block of the")
say("   reduce-scatter (3 x 8)")
say("   'via direct' is the tuner's choice at these sizes (tutorial 09): each rank reads its peer's")
say("   buffer in place; NBCOLL_ALGO=ring, like every NBCOLL_* setting, works here as it does for")
say("   nbcoll's own communicators")

# %%
# Asynchronous calls
# ------------------
#
# With ``async_op=True`` a collective returns at once with a ``Work``; nbcoll's progress thread runs it while
# the caller goes on computing, and ``wait()`` returns when it is done. Here an all-reduce of 256 KiB is
# started on both backends, a matrix product runs meanwhile, and then both are waited for.

say("   async_op=True: the call returns at once with a Work; nbcoll's progress thread runs the collective")
started = {}
for name, g in (("nbcoll", None), ("gloo", gloo)):
    t = torch.full((1 << 16,), float(rank + 1))  # 256 KiB
    started[name] = dist.all_reduce(t, group=g, async_op=True), t
meanwhile = torch.randn(64, 64) @ torch.randn(64, 64)  # the caller computes while both run
for work, _ in started.values():
    work.wait()
same(started["nbcoll"][1], started["gloo"][1])
work, t = started["nbcoll"]
assert work.is_completed() and t.eq(n * (n + 1) / 2).all()
say(f"   all_reduce(t, async_op=True) -> {type(work).__name__}; after wait() every element is {t[0].item()} on both")
say(f"      nbcoll ran {ran('all_reduce')}")
say()


# %%
# One training run on each backend
# --------------------------------
#
# The same small model, trained for 5 steps of SGD with momentum, each rank on its own micro-batches:
# ``train_on_both`` wraps it (in DDP or FSDP2, below) once on each backend, trains it, and checks that every
# parameter ends equal to gloo's. On nbcoll it also keeps what the flight recorder saw during the training and
# the bytes sent, for ``show`` to print. This cell prints nothing.


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank and for every run
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def train(model: torch.nn.Module) -> float:
    """STEPS steps of SGD with momentum, each rank on its own micro-batch; the last loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(4, 5, generator=gen), torch.randn(4, 3, generator=gen)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here; FSDP2 reduce-scatters them
        optimizer.step()
    return loss.item()


def parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    # FSDP2's parameters are DTensors, one shard per rank: full_tensor() all-gathers the whole parameter
    return [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone() for p in model.parameters()]


def train_on_both(wrap) -> tuple[dict, dict]:
    """Train ``wrap(make_model(), group)`` on nbcoll and on gloo: the parameters, and on nbcoll what ran."""
    params, seen = {}, {}
    for name, g in (("nbcoll", group), ("gloo", gloo)):
        model = wrap(make_model(), g)
        comm.reset_counters()  # count the training alone
        start = comm.recorder.count
        loss = train(model)
        if name == "nbcoll":
            seen = {"calls": ran_since(start), "sent": comm.counters.bytes_sent}
        params[name] = parameters(model)
        say(f"   last loss on rank 0, {name:>6}: {loss:.7f}")
    worst = 0.0
    for a, b in zip(params["nbcoll"], params["gloo"], strict=True):
        same(a, b)
        worst = max(worst, (a - b).abs().max().item())
    say(f"   every parameter equals gloo's within 1e-6 (largest difference {worst:.1e})")
    return params, seen


def show(calls: list) -> None:
    for what, times in Counter(e.what for e in calls).items():
        say(f"      {times} x {what}")


# %%
# 2. torch's DistributedDataParallel
# ----------------------------------
#
# Torch's own ``DistributedDataParallel``, unchanged, with ``process_group`` set to each group in turn. Its
# constructor broadcasts rank 0's weights (before the counting starts); all 66 gradients fit its first bucket,
# so each step is one all-reduce of the gradients. Look for the same last loss on both backends, the 5
# all-reduces, and the two small broadcasts of DDP's bucket order after the first step; the bytes add up
# exactly.

n_params = sum(p.numel() for p in make_model().parameters())
grad_bytes = 4 * n_params
say(f"2. torch's DistributedDataParallel, {STEPS} steps on each backend")
say(f"   the model: Linear(5, 7), Tanh, Linear(7, 3): {n_params} float32 parameters, {grad_bytes} bytes of gradients")
ddp, seen = train_on_both(lambda model, g: torch.nn.parallel.DistributedDataParallel(model, process_group=g))
say("   what nbcoll ran during the training:")
show(seen["calls"])
assert [e.nbytes for e in seen["calls"] if e.op == "all_reduce"] == [grad_bytes] * STEPS, seen
# After its first step DDP rebuilds its buckets in the order the gradients arrived, and rank 0 broadcasts that.
broadcast = sum(e.nbytes for e in seen["calls"] if e.op == "broadcast")
assert seen["sent"] == STEPS * grad_bytes + (broadcast if rank == 0 else 0), seen
sent = seen["sent"]
say(f"   bytes rank 0 sent: {sent} = {STEPS} x {grad_bytes} (each step's gradients, once) + {broadcast} (its broadcast")
say("   of DDP's bucket order, rebuilt after the first step as the gradients arrived); on 2 ranks an")
say("   all-reduce sends the whole vector once, on n ranks a ring sends 2(n-1)/n of it")
say()

# %%
# 3. FSDP2's fully_shard
# ----------------------
#
# Torch's ``fully_shard`` on a ``DeviceMesh`` of each group: the mesh of the whole world is the default group,
# so on nbcoll every collective FSDP2 issues runs on nbcoll. Each ``Linear`` becomes a unit whose parameters
# live as shards. Look for the same parameters as gloo's and as DDP's, and for the traffic: every step sends
# three times a rank's shard (two all-gathers, one reduce-scatter), more than DDP's one all-reduce, for a
# model of which each rank holds only half.

say(f"3. FSDP2's fully_shard, {STEPS} steps on each backend")
say("   each Linear is an FSDP unit: its parameters live as shards, all-gathered just before its forward")
say("   and again before its backward, and its gradients reduce-scattered back to the shards")
meshes = {group: init_device_mesh("cpu", (n,)), gloo: DeviceMesh.from_group(gloo, "cpu")}
assert meshes[group].get_group() is group  # the mesh of the whole world is the default group: "nbcoll"


def sharded(model: torch.nn.Module, g) -> torch.nn.Module:
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=meshes[g])
    return fully_shard(model, mesh=meshes[g])


fsdp, seen = train_on_both(sharded)
for a, b in zip(fsdp["nbcoll"], ddp["nbcoll"], strict=True):
    same(a, b)
say("   and equals DDP's within 1e-6: the same training, the model stored in halves")
say("   what nbcoll ran during the training:")
show(seen["calls"])
# FSDP2 splits every parameter along its rows, padded to a multiple of the ranks: 7 rows become 4 + 4 on 2 ranks
shard_bytes = 4 * sum(-(-p.shape[0] // n) * (p.numel() // p.shape[0]) for p in make_model().parameters())
assert seen["sent"] == STEPS * 3 * shard_bytes, seen
say(f"   bytes rank 0 sent: {seen['sent']} = {STEPS} x 3 x {shard_bytes}, its shard (rows padded to split evenly)")
say(f"   in the forward's all-gathers, the backward's and the reduce-scatters: {3 * shard_bytes} a step against")
say(f"   DDP's {grad_bytes}, for a model of which each rank holds half")

dist.destroy_process_group()
say()
say('Done: torch\'s collectives, DistributedDataParallel and fully_shard run on "nbcoll" and match gloo.')
