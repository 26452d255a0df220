"""
Trees, rings and the rest: the cost model behind the choice of an all-reduce algorithm
======================================================================================

How the tuner chooses among the all-reduce algorithms, and how its predictions compare with measured times.

What you learn here:

- the four all-reduce algorithms of nbcoll, each a trade between *steps* (each costs a latency, alpha) and
  *bytes* (each byte copied or folded costs 1/bandwidth, beta): ring (``2n-1`` steps a round, each byte copied
  or folded about 3 times), double binary tree (about ``4 log2 n`` steps, up to 3.5 copies through an inner
  node), direct (one step per window, ``n`` buffers folded) and halving-doubling (``4 log2 n`` steps, a copy
  of the buffer and then as much as the ring);
- the tuner's estimate ``time = gamma + steps x alpha + bytes / beta`` (gamma: the fixed cost of a call), with
  ``comm.estimate``, and where it switches
  from one algorithm to the next as the message grows, for 4, 8 and 64 ranks;
- how to force an algorithm (``algo=``, or ``NBCOLL_ALGO=ring`` for a whole job), and how the measured times of
  each algorithm compare with the model's.

Run it with ``python tutorials/09_trees_and_algorithm_choice.py``: it re-launches itself on 4 ranks. The
measurements use the numpy backend (``nbcoll.use_backend("numpy")``) whatever the default backend is: they time
the algorithms, not the simulator. On a machine shared with other work, the times are noisy.
"""

# %%
# Set-up
# ------
#
# ``relaunch(4)`` runs this script again on 4 ranks; everything after it runs on each of them. Rank 0 narrates,
# through ``say``; the other three take part in every collective and print only their own checks, so their
# output is short, and opens by saying so. ``human`` writes a size in B, KiB, MiB or GiB.

import os

import nbcoll.launch

nbcoll.launch.relaunch(4)

# Everything below runs on each of the 4 ranks.
import dataclasses  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

# A small FIFO for the first part, so that even small buffers take several chunks. Read at init().
os.environ.setdefault("NBCOLL_BUFFSIZE", "256")

import nbcoll  # noqa: E402
from nbcoll.comm import CommConfig, init, tuner  # noqa: E402
from nbcoll.comm.algorithms import ALGORITHMS, parse_algo_setting  # noqa: E402
from nbcoll.comm.algorithms.tree import HeapTree  # noqa: E402

world = MPI.COMM_WORLD  # only for the tutorial's own timing and printing, never for the data
rank = world.rank
ALGOS = list(ALGORITHMS["all_reduce"])  # ring, tree, direct, halving_doubling


def say(text: str = "") -> None:
    """Rank 0 narrates; the other ranks only report their checks."""
    if rank == 0:
        print(text)


def human(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{int(nbytes)} B"


say(f"Tutorial 09 on the {nbcoll.get_backend()!r} backend, {world.size} ranks")
say()
if rank != 0:
    print(f"rank {rank}: rank 0 narrates; I run every collective with it and print only my own checks")

# %%
# 1. Every algorithm gives the same answer
# ----------------------------------------
#
# ``algo=`` forces one algorithm; without it the tuner picks. The inputs are integers, ``i * (rank + 1)``, so the
# check is exact whatever the order of the sums. Every rank checks its own result and says so: four ``ok`` lines
# per rank, one per algorithm.

comm = init()
n = comm.size
say(f"1. all-reduce with every algorithm ({comm.config.chunk_bytes} B chunks)")
values = (np.arange(13) * (rank + 1)).astype(np.int32)
expected = np.arange(13, dtype=np.int32) * sum(r + 1 for r in range(n))
for algo in ALGOS:
    x = nbcoll.to_device(values)
    comm.all_reduce(x, algo=algo)
    assert np.array_equal(nbcoll.to_host(x), expected), algo
    print(f"rank {rank}: all_reduce(algo={algo!r}) matches NumPy: ok")
comm.destroy()
world.barrier()
say()

# %%
# 2. The shapes: who talks to whom
# --------------------------------
#
# The tree is a binary heap (children ``2p+1`` and ``2p+2``). The *double* binary tree gives half the buffer to a
# second tree, the mirror image of the first, in which leaves of the first tree are inner nodes: the forwarding
# is shared among more ranks. nbcoll runs the two halves one after the other, as it has one connection per pair
# of ranks. The output lists both trees on 8 ranks, each inner node with its children: ranks 4 to 7 are leaves
# of the first tree, and ranks 5, 6 and 7 are inner nodes of the mirror.

say("2. the double binary tree on 8 ranks: rank -> children")
for mirrored in (False, True):
    tree = HeapTree(8, mirrored=mirrored)
    links = ", ".join(f"{r}->{tree.children(r)}" for r in range(8) if tree.children(r))
    say(f"   {'mirror' if mirrored else 'first '}: {links}")
say()

# %%
# 3. The cost model: ``gamma + steps x alpha + bytes / beta``
# -----------------------------------------------------------
#
# ``tuner.cost_terms`` counts, for the busiest rank, the steps it waits through and the bytes it copies or folds
# (a chunk through a FIFO is copied in by its sender and out by its receiver). The estimate weighs them with
# ``alpha`` and ``beta`` and adds ``gamma``, the fixed cost of a call: this machine's calibrated values
# (``mpiexec -n 2 python -m nbcoll calibrate`` fits them to timed collectives), or the defaults of the backend.
#
# Each cell of the table is ``steps, bytes`` for one algorithm and one message size, on 4 ranks. Read across a
# row: the ring always moves the fewest bytes, and direct the most, though for small messages direct takes the
# fewest steps. Read down a column: small messages all take the same steps; once a message spans more chunks,
# the steps grow with its size.

CHUNK = CommConfig().chunk_bytes  # the default FIFO: 4 MiB in 8 slots
say(f"3. cost terms of all-reduce on n = 4 ranks, {human(CHUNK)} chunks: (steps, bytes copied or folded)")
say("   " + f"{'size':>10}" + "".join(f"{a:>20}" for a in ALGOS))
for size in (64, 64 << 10, 4 << 20, 64 << 20):
    terms = [tuner.cost_terms("all_reduce", a, size, 4, CHUNK) for a in ALGOS]
    say("   " + f"{human(size):>10}" + "".join(f"{f'{s:.0f}, {human(b)}':>20}" for s, b in terms))
say()

# %%
# 4. Where the tuner switches algorithm
# -------------------------------------
#
# For each model (a GPU node's defaults, and this CPU's numpy defaults) and rank count, ``crossovers`` finds the
# message sizes at which the cheapest estimate changes hands, by doubling the size and then bisecting each
# change. Each line of the output reads as a plan: from 1 byte on, the tuner picks direct, then from the next
# size on the next algorithm, and so on. On 64 ranks the plan has more stages than on 4.


def crossovers(nranks: int, model: tuner.LinkModel, chunk_bytes: int) -> list[tuple[int, str]]:
    """``[(first size, algorithm), ...]``: from each size on, the tuner picks that algorithm."""

    def pick(size: int) -> str:
        return tuner.choose("all_reduce", ALGOS, size, nranks, chunk_bytes, model)

    changes = [(1, pick(1))]
    low = 1
    while low < 1 << 34:
        high = 2 * low
        if pick(high) != pick(low):
            a, b = low, high  # pick(a) differs from pick(b): bisect to the first size of the new choice
            while b - a > 1:
                mid = (a + b) // 2
                a, b = (mid, b) if pick(mid) == pick(a) else (a, mid)
            # Go on doubling from the change. A choice that flips and flips back within one doubling would be
            # missed: this scan is a picture of the model, not a proof.
            changes.append((b, pick(b)))
            low = b
            continue
        low = high
    return changes


say("4. the tuner's choice of all-reduce algorithm, by message size")
for label, model in (
    ("GPU node (cuda, ipc defaults)", tuner.LinkModel(*tuner.DEFAULTS["cuda"]["ipc"])),
    ("this CPU (numpy, ipc defaults)", tuner.LinkModel(*tuner.DEFAULTS["numpy"]["ipc"])),
):
    say(f"   {label}: gamma = {model.gamma * 1e6:g} us, alpha = {model.alpha * 1e6:g} us, beta = {human(model.beta)}/s")
    for nranks in (4, 8, 64):
        changes = [f"{algo} from {human(size)}" for size, algo in crossovers(nranks, model, CHUNK)]
        line = f"     n = {nranks:2d}: " + ", then ".join(changes)
        if len(line) > 100:  # too wide to read on one line: one change a line
            line = f"     n = {nranks:2d}: " + (",\n" + " " * 13 + "then ").join(changes)
        say(line)
say("   Halving-doubling sends what the ring sends, but first copies the buffer into the output:")
say("   where bytes dominate, the model puts it behind the ring, and only its fewer steps win it a")
say("   range on many ranks. Direct wins while latency dominates; the larger n, the sooner it stops")
say("   winning.")
say()

# %%
# 5. Narrowing the choice: ``NBCOLL_ALGO``, in NCCL's ``NCCL_ALGO`` syntax
# ------------------------------------------------------------------------
#
# A list allows, a leading ``^`` excludes, and ``collective:list`` pairs separated by ``;`` apply to one
# collective each. The tuner then picks among what is left; an explicit ``algo=`` argument bypasses the setting.
# For three settings, the output gives what is left to the tuner for all-reduce and for broadcast (which has
# only the ring and the tree). The third setting spells the collective ``allreduce``, as NCCL does.

say("5. NBCOLL_ALGO: the algorithms each setting leaves to the tuner")
for setting in ("ring,tree", "^direct", "allreduce:tree;broadcast:ring"):
    allowed = parse_algo_setting(setting)
    allowed_text = f"all_reduce: {sorted(allowed['all_reduce'])}, broadcast: {sorted(allowed['broadcast'])}"
    say(f"   NBCOLL_ALGO={setting!r}")
    say(f"      {allowed_text}")
say()

# %%
# 6. Measured against predicted, on the numpy backend
# ---------------------------------------------------
#
# A communicator made inside ``use_backend("numpy")`` moves NumPy arrays through shared memory. Its FIFO is a
# realistic one (chunks of 64 KiB) so that the larger sizes do not take thousands of steps. Each time is the
# slowest rank's average over a few calls, after one call to warm up.
#
# The table has one row per algorithm and one column per message size; each cell is the measured time in ms
# with the model's prediction in brackets. The last two rows compare the tuner's pick (the lowest prediction)
# with the fastest measured. Where 4 ranks share a few cores the measured times can be far above the
# predictions, and on a machine shared with other work they are noisy.

ITERATIONS = 5
SIZES = (256, 16 << 10, 1 << 20)
with nbcoll.use_backend("numpy"):
    config = dataclasses.replace(CommConfig.from_env(), buffsize=512 << 10, steps=8)
    comm = init(config=config)
    say(f"6. measured (predicted) ms per all-reduce on {n} ranks, numpy backend, {human(config.chunk_bytes)} chunks")
    misses = []  # (slowdown of the tuner's pick against the fastest, size, pick, fastest)
    cells = {algo: [] for algo in ALGOS}  # one "measured (predicted)" cell per size
    picks, fastests = [], []
    for size in SIZES:
        data = np.full(size // 4, rank + 1, np.float32)
        measured, predicted = [], []
        for algo in ALGOS:
            x = nbcoll.to_device(data)
            comm.all_reduce(x, algo=algo)  # warm up
            world.barrier()
            start = time.perf_counter()
            for _ in range(ITERATIONS):
                comm.all_reduce(x, algo=algo)
            measured.append(world.allreduce((time.perf_counter() - start) / ITERATIONS, op=MPI.MAX))
            predicted.append(comm.estimate("all_reduce", size, algo=algo))
            # In place, 1 + ITERATIONS times: first 1 + 2 + ... + n everywhere, then n times that, again and again.
            assert np.allclose(nbcoll.to_host(x), sum(range(1, n + 1)) * n**ITERATIONS), algo
        # The tuner picks the lowest estimate (ties go to the first algorithm in the list).
        chosen, fastest = ALGOS[int(np.argmin(predicted))], ALGOS[int(np.argmin(measured))]
        if chosen != fastest:
            misses.append((measured[ALGOS.index(chosen)] / min(measured), size, chosen, fastest))
        for algo, m, p in zip(ALGOS, measured, predicted, strict=True):
            cells[algo].append(f"{m * 1e3:.2f} ({p * 1e3:.2f})")
        picks.append(chosen)
        fastests.append(fastest)
    comm.destroy()
say("   " + " " * 18 + "".join(f"{human(size):>16}" for size in SIZES))
for label, row in [*cells.items(), ("tuner picks", picks), ("fastest", fastests)]:
    say("   " + f"{label:<18}" + "".join(f"{cell:>16}" for cell in row))
print(f"rank {rank}: every measured all-reduce matches NumPy: ok")
world.barrier()
say()

# %%
# What the comparison says
# ------------------------
#
# A model only needs to rank the algorithms, not to predict their times. Rank 0 says whether the tuner's pick
# was the fastest at every size, and if not, how much time the worst miss cost, and what to do about it.

if misses:
    slowdown, size, chosen, fastest = max(misses)
    say(f"   The tuner missed the fastest algorithm at {len(misses)} of {len(SIZES)} sizes. The worst miss:")
    say(f"   at {human(size)} it picks {chosen}, which took {slowdown:.1f}x the time of {fastest}.")
    say("   Its parameters are defaults measured once, not this machine's, and 4 ranks sharing a few")
    say("   cores wait on the scheduler, a cost the alpha-beta model does not have. A model only needs")
    say("   to rank the algorithms, and an uncalibrated one can rank them wrongly. To set it right:")
else:
    say("   The tuner picked the fastest algorithm at every size: a model only needs to rank the")
    say("   algorithms, not to predict their times exactly. To keep it so on another machine:")
say("   calibrate it with 'mpiexec -n 2 python -m nbcoll calibrate',")
say("   or force a choice with algo= or NBCOLL_ALGO.")
say("Try it yourself: python -m nbcoll exercise tree_broadcast")
print(f"Done: rank {rank} ok")
