"""
Benchmarking like nccl-tests
============================

Time a collective, turn the time into algbw and busbw, and check every element.

What you learn here:

- how to time a collective fairly: warm-up calls, a barrier so every rank starts together, many calls back to
  back, and the slowest rank's time (a collective is done when its last rank is done);
- what nccl-tests' two bandwidths mean: algbw = S / time, and busbw = algbw x a factor per collective
  (2(n-1)/n for all-reduce) that gives the bytes each link of a ring really carries, comparable across ranks;
- how ``#wrong`` can be exact: inputs of small whole numbers make the sum exact in every dtype, whatever order
  the ranks' values are added in;
- how ``nbcoll.perf`` does all of this in a sweep, and prints the same table as nccl-tests.

Run it with ``python tutorials/17_benchmarking_like_nccl_tests.py``: it re-launches itself on 4 ranks on the
``numpy`` backend unless ``NBCOLL_BACKEND`` names another (``NBCOLL_BACKEND=sim`` works too, slowly, at toy
sizes). Its tests and the docs build run it as a plain run does, with ``NBCOLL_BACKEND=numpy``. The same table
from a shell::

    mpiexec -n 4 python -m nbcoll.perf all_reduce -b 8 -e 8M -f 4 --backend numpy
"""

# %%
# Set-up
# ------
#
# ``relaunch(4)`` starts this script on 4 ranks, on the ``numpy`` backend unless ``NBCOLL_BACKEND`` says
# otherwise, and prints each rank's output after a ``[rank r]`` line. Rank 0 prints every step (``say``); in
# section 3 each rank prints its own line, so ranks 1-3 have one line each. ``world`` is MPI's communicator:
# its barrier and its maximum over the ranks time the nbcoll communicator ``comm`` from outside.

import os

import nbcoll.launch

nbcoll.launch.relaunch(4, env={"NBCOLL_BACKEND": os.environ.get("NBCOLL_BACKEND", "numpy")})

# Everything below runs on each of the 4 ranks.
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll.comm import init  # noqa: E402
from nbcoll.perf import Options, bandwidth, bus_factor, exact, run, table  # noqa: E402
from nbcoll.perf.plot import draw as draw_busbw  # noqa: E402

world = MPI.COMM_WORLD
comm = init()
n, rank = comm.size, comm.rank
lead = rank == 0
small = nbcoll.get_backend() == "sim"  # the simulator runs ~150 us per thread: keep its buffers tiny


def say(text: str) -> None:
    if lead:
        print(text, flush=True)


# %%
# 1. Time one all-reduce by hand
# ------------------------------
#
# Warm-up first: the first calls pay for connections and page faults. Then, for each sample, a barrier, so that
# no rank starts early and waits inside the collective for the others (that waiting would count as the
# collective's time). A collective is done when its slowest rank is done, so each sample is the maximum of the
# ranks' times, and the median of the samples shrugs off one where another process took the core.
count = 1 << 8 if small else 1 << 18
x = nbcoll.to_device(np.ones(count, np.float32))
y = nbcoll.zeros(count, np.float32)
for _ in range(2):
    comm.all_reduce(x, y)
samples = []
for _ in range(3 if small else 10):
    world.Barrier()
    start = time.perf_counter()
    comm.all_reduce(x, y)
    mine = time.perf_counter() - start
    samples.append(world.allreduce(mine, op=MPI.MAX))  # done when the slowest rank is done
seconds = statistics.median(samples)  # the median shrugs off a sample where another process took the core
nbytes = count * 4
say(f"1. all_reduce of {nbytes} bytes on {n} ranks: median {seconds * 1e6:.0f} us over {len(samples)} samples")

# %%
# 2. algbw and busbw
# ------------------
#
# algbw divides the buffer size by the time. But a ring all-reduce sends every byte 2(n-1)/n times over each
# link (a reduce-scatter, then an all-gather), so the links carry more than algbw says: busbw = algbw x
# 2(n-1)/n is what each link carried, the number to hold against the hardware's peak, whatever n is. Each
# collective has its own factor: the lines below print four of them for 4 ranks.
algbw = nbytes / seconds / 1e9
say(f"2. algbw = S / t = {algbw:.3f} GB/s; busbw = algbw x 2(n-1)/n = {algbw * bus_factor('all_reduce', n):.3f} GB/s")
for collective in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
    say(f"   busbw factor of {collective} on {n} ranks: {bus_factor(collective, n):.3f}")

# %%
# 3. An exact check
# -----------------
#
# Random floats would make the sum depend on the order of the additions, so a check would need a tolerance.
# Small whole numbers add exactly in every float type: the result is a single value per element, and any
# difference is a real error. Each rank's input repeats a short pattern that depends on its rank; every rank
# prints its own input and its count of wrong elements (``#wrong = 0``), ranks 1-3 under their own
# ``[rank r]`` lines.
mine = exact.rank_input(rank, "sum", np.dtype(np.float16), 0, 12)
got = nbcoll.zeros(12, np.float16)
comm.all_reduce(nbcoll.to_device(mine), got)
want = exact.reduced_values("sum", np.dtype(np.float16), n, 0, 12)
print(f"3. rank {rank}: input {mine.astype(int).tolist()}; #wrong = {exact.count_wrong(nbcoll.to_host(got), want)}")
world.Barrier()

# %%
# 4. The nccl-tests table
# -----------------------
#
# ``nbcoll.perf`` runs the sweep: for each size, out-of-place and then in-place, the timed calls and the check.
# Every rank gets the same rows; rank 0 prints them. The table has nccl-tests' own columns, and is as wide as
# nccl-tests' (scroll to the right to see the in-place half): size, count, type, reduction op and root, then
# time, algbw, busbw and ``#wrong`` for out-of-place and again for in-place. The footer sums up the check and
# averages the busbw column. The same column is then drawn against the size; small messages are dominated by
# the fixed cost of a call, so busbw grows with the size.
top = 1 << 10 if small else 1 << 20
options = Options("all_reduce", sizes=bandwidth.size_sweep(8, top, 16), iters=2 if small else 10, warmup=1)
say("4. python -m nbcoll.perf all_reduce, as a library call:")
say(table.header())
rows = run(comm, world, options, on_row=lambda row, algo: say(table.row(row)))
say(table.footer(rows))
if lead:
    # The busbw column as a picture (--plot does the same from a shell). NBCOLL_FIGURES_DIR, when set (the docs
    # build sets it), receives it and keeps it; otherwise a temporary folder, removed when the tutorial ends.
    asked = os.environ.get("NBCOLL_FIGURES_DIR")
    scratch = None if asked else tempfile.TemporaryDirectory(prefix="nbcoll-tutorial-17-")
    figures = asked or scratch.name
    os.makedirs(figures, exist_ok=True)
    title = f"all_reduce on {n} ranks, {nbcoll.get_backend()} backend: busbw against size"
    kept = "" if asked else " (removed at the end: set NBCOLL_FIGURES_DIR=DIR to keep it)"
    say(f"   busbw against size: {draw_busbw(rows, os.path.join(figures, 'busbw_all_reduce.png'), title)}{kept}")

# %%
# 5. One size, every algorithm, and what the tuner predicted
# ----------------------------------------------------------
#
# nccl-tests measures whatever NCCL chooses; nbcoll lets you pick (``--algo``) and compare the choice with the
# cost model's prediction (``comm.estimate``): steps x alpha + bytes / beta, with this machine's calibrated
# alpha and beta or the tuner's defaults. Where the two disagree by a large factor, the measurement is what
# happened and the model is what the tuner believes: ``python -m nbcoll calibrate`` measures the constants, and
# ``benchmarks/model_fit.py`` compares prediction and measurement over sizes and collectives.
one = Options("all_reduce", sizes=[top], iters=2 if small else 5, warmup=1, algos=["ring", "tree", "direct"])
for row in run(comm, world, one):
    predicted = comm.estimate("all_reduce", row.nbytes, algo=row.algo)
    say(
        f"5. {row.algo:>6}: measured {row.out_of_place.seconds * 1e6:8.0f} us, "
        f"the tuner predicted {predicted * 1e6:8.0f} us, busbw {row.out_of_place.busbw:.3f} GB/s"
    )

comm.destroy()
say("Done: timed, converted to busbw and checked exactly, as nccl-tests does.")
