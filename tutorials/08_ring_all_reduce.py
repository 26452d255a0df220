"""
Ring all-reduce, step by step: every rank's buffer after every step, the traffic it costs, and its trace
========================================================================================================

What you learn here:

- how a ring all-reduce works: a *reduce-scatter*, where each block travels once round the ring collecting every
  rank's contribution, then an *all-gather*, where each finished block travels round again: ``2(n-1)`` hops
  per round, ``2n-1`` primitives;
- that an algorithm in nbcoll is a generator of primitives (``send``, ``recv_reduce_send``,
  ``recv_reduce_copy_send``, ``recv_copy_send``, ``recv``), and that you can run them yourself, one at a time;
- how the buffer is cut into rounds of ``n`` blocks of at most one FIFO slot each, and why every rank sends
  ``2(n-1)/n`` of the buffer: the least any all-reduce can send;
- how ``NBCOLL_TRACE`` records every step, and how ``nbcoll.comm.trace_view`` draws the trace.

Run it with ``python tutorials/08_ring_all_reduce.py``: it re-launches itself on 4 ranks. Rank ``r`` contributes
``10**r`` to every element, so a partial sum says which ranks it holds: ``110`` is ranks 1 and 2, ``1111`` is
everyone.
"""

# %%
# Set-up
# ------
#
# The tutorial re-launches itself on 4 ranks first; everything after ``relaunch`` runs on each of them. The FIFO
# is made small on purpose, 8 slots of 32 bytes: a chunk holds 4 ``int64`` elements, so even a short buffer
# needs several rounds. Rank 0 narrates; the other ranks print only their own checks.

import os

import nbcoll.launch

nbcoll.launch.relaunch(4)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

# A FIFO of 8 slots of 32 bytes: a chunk holds 4 int64 elements, so even a short buffer needs several rounds.
# The communicator reads this when it is created.
os.environ.setdefault("NBCOLL_BUFFSIZE", "256")

import nbcoll  # noqa: E402
from nbcoll.comm import init  # noqa: E402
from nbcoll.comm.algorithms import ring  # noqa: E402
from nbcoll.comm.algorithms.common import Context, rounds  # noqa: E402
from nbcoll.comm.trace_view import draw  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="", help="keep the trace and its picture in this folder (default: removed)")
args = parser.parse_args()

world = MPI.COMM_WORLD  # only for the tutorial's own printing and checks, never for the data
comm = init()
rank, n = comm.rank, comm.size
COUNT = 18  # not a multiple of anything: the last round is short, and some of its blocks are empty
DTYPE = np.int64


def say(text: str = "") -> None:
    """Rank 0 narrates; the other ranks stay quiet so the story reads once."""
    if rank == 0:
        print(text)


say(f"Tutorial 08 on the {nbcoll.get_backend()!r} backend, {n} ranks")
chunk_elems = comm.config.chunk_bytes // np.dtype(DTYPE).itemsize
say(f"FIFO: {comm.config.steps} slots of {comm.config.chunk_bytes} bytes = {chunk_elems} x int64 per chunk")
say()

# %%
# 1. How the buffer is cut
# ------------------------
#
# The ring moves the buffer in rounds. A round covers up to ``n x chunk`` elements, cut into ``n`` near-equal
# blocks, so that every step of the round moves at most one chunk (one FIFO slot). Block ``b`` of a round
# finishes on rank ``b``.
plan = list(rounds(COUNT, n, chunk_elems))
say(f"1. {COUNT} elements on {n} ranks: {len(plan)} rounds of at most {n} x {chunk_elems} elements")
for number, blocks in enumerate(plan):
    say(f"   round {number}: blocks " + "  ".join(f"{b}=[{lo}:{hi})" for b, (lo, hi) in enumerate(blocks)))
say()

# %%
# 2. The algorithm, one primitive at a time
# -----------------------------------------
#
# ``comm.all_reduce`` builds this ``Context`` and hands the generator to its progress loop. Here we pull the
# primitives ourselves. A primitive never blocks: ``ready()`` says whether the chunk it reads has arrived and the
# slot it writes is free, and ``run()`` then does the whole step.
buffer = nbcoll.to_device(np.full(COUNT, 10**rank, dtype=DTYPE))
ctx = Context(
    rank=rank,
    nranks=n,
    chunk_elems=chunk_elems,
    fifo_steps=comm.config.steps,
    op="sum",
    post=None,
    send_connection=comm.send_connection,
    recv_connection=comm.recv_connection,
    counters=comm.peer_counters,
)
steps = list(ring.all_reduce(ctx, buffer, buffer))  # in place: buffer is both the input and the output


def describe(step, received) -> str:
    lo, hi = step.span
    frm = f" from {step.recv[0].peer}" if step.recv else ""
    to = f" to {step.send[0].peer}" if step.send else ""
    got = ""
    if received is not None:
        got = f" got {received.tolist()}" if received.size else " got nothing (an empty block)"
    return f"{step.name:<21} [{lo:2d}:{hi:2d}){frm}{to}{got}"


per_round = 2 * n - 1
say(f"2. in-place ring all-reduce: {len(steps)} primitives per rank: {len(plan)} rounds x {per_round} (2n-1)")
say(f"   a round is {2 * (n - 1)} hops: every primitive but the first receives, every one but the last sends")
say("   rank r starts with 10**r everywhere; 'got' is the chunk the left neighbour sent. During the")
say("   reduce-scatter the partial sums travel in the FIFO slots, not in the buffers:")
say("   watch the 'got' column.")

# %%
# Every step, on every rank
# -------------------------
#
# A rank's step ``k`` only needs its left neighbour's step ``k-1``, so the tutorial can stop all ranks after each
# step to print their buffers without risking a deadlock. Rank 0 gathers what every rank did and holds, and
# prints it: in the reduce-scatter, each block gains one rank's contribution per hop; in the all-gather, the
# finished blocks (``1111``) travel round.

world.barrier()
for number, step in enumerate(steps):
    while not step.ready():
        pass
    received = None
    if step.recv:
        # Look at the chunk in the slot before the step consumes it: what the left neighbour sent.
        received = nbcoll.to_host(step.recv[0].peek().view(DTYPE))[: step.count]
    step.run()
    lines = world.gather(describe(step, received), root=0)
    buffers = world.gather(nbcoll.to_host(buffer), root=0)
    if rank == 0:
        # The first n primitives of a round reduce-scatter (the last of them finishes a block), the rest gather.
        phase = "reduce-scatter" if number % per_round < n else "all-gather"
        print(f"   step {number} ({phase}, round {number // per_round})")
        for r in range(n):
            print(f"     rank {r}: {lines[r]}")
        for r in range(n):
            # At most 12 values a line, so that the table fits a page: the rest goes on the next line.
            rows = [" ".join(f"{v:4d}" for v in buffers[r][i : i + 12]) for i in range(0, COUNT, 12)]
            print(f"     rank {r} buffer: " + ("\n" + " " * 20).join(rows))
result = nbcoll.to_host(buffer)
assert np.array_equal(result, np.full(COUNT, sum(10**r for r in range(n)), DTYPE)), result
print(f"rank {rank}: step-by-step ring all-reduce matches NumPy: ok")
say()

# %%
# 3. What it cost
# ---------------
#
# In round ``k``, rank ``r`` sends every block but block ``r`` in the reduce-scatter (block ``r`` ends here) and
# every block but block ``r+1`` in the all-gather (block ``r+1`` is the last to arrive, and goes no further):
# ``2 x round - |block r| - |block r+1|`` elements per round. When the round divides evenly, that is
# ``2(n-1)/n`` of the round: the least any all-reduce can send.
expected_elements = 0
for blocks in plan:
    size_of = [hi - lo for lo, hi in blocks]
    expected_elements += 2 * sum(size_of) - size_of[rank] - size_of[(rank + 1) % n]
say("3. what it cost: the elements each rank sent, against the formula")
sent = comm.counters.bytes_sent // np.dtype(DTYPE).itemsize
assert sent == expected_elements, (sent, expected_elements)
fraction = sent / COUNT
print(
    f"rank {rank}: sent {sent} elements = {fraction:.3f} x the buffer "
    f"(2(n-1)/n = {2 * (n - 1) / n:.3f}); traffic formula: ok"
)
world.barrier()
say()

# %%
# 4. The same collective through ``comm.all_reduce``, traced
# ----------------------------------------------------------
#
# ``NBCOLL_TRACE=DIR`` makes each rank write one JSON line per primitive to ``DIR/rank<r>.jsonl``. Like every
# setting, it is read once, when a communicator is created: so the traced call runs on a new communicator, whose
# config says ``trace=DIR`` (what the variable would have said). Every rank must use the same directory: rank 0
# makes it, a temporary one, removed when rank 0 ends, unless ``--out`` names a folder to keep. The picture has
# one row per rank, one box per step and one arrow per chunk.
scratch = tempfile.TemporaryDirectory(prefix="nbcoll-ring-trace-") if rank == 0 and not args.out else None
trace_dir = world.bcast(args.out or (scratch.name if scratch else None), root=0)
os.makedirs(trace_dir, exist_ok=True)
traced = init(config=dataclasses.replace(comm.config, trace=trace_dir))
x = nbcoll.to_device(np.full(COUNT, 10**rank, dtype=DTYPE))
traced.all_reduce(x, algo="ring")
traced.destroy()  # closes the trace files
assert np.array_equal(nbcoll.to_host(x), result)
print(f"rank {rank}: comm.all_reduce(algo='ring') gives the same result: ok")
world.barrier()  # every rank's trace file is complete
if rank == 0:
    # NBCOLL_FIGURES_DIR, when set (the docs build sets it), is where the picture goes instead.
    png = draw(trace_dir, Path(os.environ.get("NBCOLL_FIGURES_DIR") or trace_dir) / "ring_all_reduce.png", seq=1)
    print()
    print(f"4. the trace of comm.all_reduce: {trace_dir}/rank*.jsonl,")
    print(f"   drawn to {png}")
    print("   one row per rank, one box per step, one arrow per chunk; the same picture from the command line:")
    print(f"   python -m nbcoll trace view {trace_dir} -o ring.png --seq 1")
    if scratch is not None:
        print("   (the folder is removed when the tutorial ends: run it with --out DIR to keep the trace)")

# %%
# The end
# -------
#
# Every rank destroys its communicator and says it is done. Then write the ring yourself: the exercise checks
# your generator of primitives against the one above.

say("Try it yourself: python -m nbcoll exercise ring_all_reduce")
comm.destroy()
print(f"rank {rank}: Done: ok")
