"""
The collective as one kernel
============================

Tutorial 08's ring all-reduce, now stepped on the device instead of from Python.

What you learn here:

- that NCCL runs a whole collective inside one kernel: its primitives (``send``, ``recv_reduce_send``, ...) are
  device functions, and the host only launches; nbcoll's are in ``nbcoll.comm.device.prims``, and the ring
  built on them in ``nbcoll.comm.algorithms.ring_device``;
- how the ranks of a one-GPU world are groups of threads of one block, so that every rank is running while the
  others wait for it, and how the grid's blocks are channels;
- how a connection is a FIFO of slots in the receiver's memory and two counters that only grow: ``tail``,
  written by the sender (steps posted), and ``head``, written by the receiver (steps consumed); printed here
  after each call;
- why a spin needs a volatile load: the PTX of the ring's spin, compiled for sm_90, with its ``ld.volatile``
  inside the loop, and how the abort word lets a kernel return when a peer never comes.

Run it with ``python tutorials/21_collective_as_one_kernel.py``. It runs in one process, on the simulator where
there is no GPU (there each rank is 4 Python threads, so the sizes are toys: 3 ranks, 7 elements, slots of 2).
Rank ``r`` contributes ``10**r``, so ``111`` in every element says that all three ranks were added.
"""

# %%
# Set-up
# ------
#
# One process, no ``relaunch``: the 3 ranks are groups of threads of one block of one kernel. On a GPU each
# rank's group is a warp of 32 threads (the named barriers that sync a group count whole warps); on the
# simulator, where each thread is a Python thread, 4 are enough. Each connection between neighbours is a FIFO
# of 2 slots of 2 elements, so 7 elements take several rounds.

import os
import re
import subprocess
import sys
import textwrap

import numpy as np

# nbcoll is imported before numba.cuda: it decides whether numba.cuda is the GPU or the simulator.
import nbcoll
from nbcoll.backend import cuda as numba_cuda
from nbcoll.backend import device_backend
from nbcoll.comm.algorithms import ring_device as rd
from nbcoll.comm.algorithms.common import rounds
from nbcoll.comm.device import prims as dp
from nbcoll.comm.errors import CommAbortedError

N, COUNT, SLOT, STEPS = 3, 7, 2, 2  # 3 ranks, 7 elements, FIFOs of 2 slots of 2 elements: several rounds
cuda = numba_cuda()
GROUP = 32 if device_backend() == "cuda" else 4  # threads per rank (a GPU's named barriers count warps)

print(f"Tutorial 21 on the {nbcoll.get_backend()!r} backend (device: {device_backend()}), {N} ranks")
print(f"one block of {N} x {GROUP} threads; each connection: {STEPS} slots of {SLOT} elements")
print()

# %%
# 1. The schedule
# ---------------
#
# Tutorial 08's schedule, now one rank's loop inside the kernel: ``ring_all_reduce_kernel`` runs it in every
# rank's group of threads, with the same rounds and blocks as the host ring (``common.rounds``) and the same
# 2n-1 primitives a round. Each primitive moves one chunk through one FIFO slot. Each rank's first line is the
# reduce-scatter half, ending with ``recv_reduce_copy_send``, which writes the block's final value; the second
# line is the all-gather half, which passes the final blocks on. The last round has one element left: most of
# its blocks are empty (``[7:7)``), and their primitives move nothing.
plan = list(rounds(COUNT, N, SLOT))
print(f"1. the schedule: {COUNT} elements in {len(plan)} rounds of {N} blocks of at most {SLOT} (one slot each)")


def schedule(rank: int, blocks: list[tuple[int, int]]) -> list[str]:
    """Rank ``rank``'s primitives of one round, with the block each moves (as the kernel's loop picks them)."""
    steps = [("send", (rank - 1) % N)]
    steps += [("recv_reduce_send", (rank - j) % N) for j in range(2, N)]
    steps += [("recv_reduce_copy_send", rank)]
    steps += [("recv_copy_send", (rank - j) % N) for j in range(1, N - 1)]
    steps += [("recv", (rank + 1) % N)]
    return [f"{name} [{blocks[b][0]}:{blocks[b][1]})" for name, b in steps]


for number, blocks in enumerate(plan):
    print(f"   round {number}: blocks " + "  ".join(f"{b}=[{lo}:{hi})" for b, (lo, hi) in enumerate(blocks)))
    for rank in range(N):
        steps = schedule(rank, blocks)  # the first N are the reduce-scatter half, the rest the all-gather half
        print(f"     rank {rank}: " + ", ".join(steps[:N]) + ",")
        print(" " * 13 + ", ".join(steps[N:]))
print()

# %%
# 2. One launch, every rank: the counters after each call
# -------------------------------------------------------
#
# ``DeviceRing`` allocates the FIFOs and counters once. ``tail[r]`` counts the steps rank r-1 posted into rank
# r's FIFO, ``head[r]`` the steps rank r consumed (freeing the slot again). They are never reset: the next call
# reads where the last one left off and carries on counting, so a call can be replayed (a CUDA graph) without a
# reset. Rank ``r`` contributes ``10**r`` to every element: a sum of 111 says all three ranks were added, and
# the third call, a max, gives 100. Look for tail growing by the same number each call, and head equal to it.
ring = rd.DeviceRing(N, slot_elems=SLOT, steps=STEPS, group_threads=GROUP)
x = np.stack([np.full(COUNT, 10**r, np.int64) for r in range(N)])


def counters() -> str:
    tail, head = ring.tail.copy_to_host(), ring.head.copy_to_host()
    at = [dp.counter_at(0, r, N) for r in range(N)]
    return "  ".join(f"rank {r}: tail {tail[i]:2d} head {head[i]:2d}" for r, i in enumerate(at))


print("2. the all-reduce, one kernel; each rank's counters of channel 0 after each call")
print("   before any call:")
print(f"     {counters()}")
for call, op in enumerate(("sum", "sum", "max")):
    out = ring.all_reduce(x.copy(), op=op)
    expected = {"sum": x.sum(axis=0), "max": x.max(axis=0)}[op]
    assert (out == expected).all(), out  # every rank's row is NumPy's answer, exactly (integers)
    assert (out == rd.all_reduce_reference(x, op, SLOT)).all()  # and the NumPy copy of the kernel's own steps
    print(f"   after call {call} ({op}):")
    print(f"     {counters()}")
    print(f"     rank 0's row: {out[0].tolist()} = NumPy's {op} over the ranks: ok")
per_call = len(plan) * 2 * (N - 1)
print(f"   each call posts {len(plan)} rounds x 2(n-1) = {per_call} steps into each FIFO: tail grows by {per_call};")
print("   head follows tail: every chunk posted was consumed")
print()

# %%
# 3. A peer that never comes
# --------------------------
#
# Every spin reads the abort word every few spins (NCCL: every 10,000). Here the host has set it already and
# launches the groups of two ranks only: rank 2 never runs, so the others give up instead of spinning forever.
# The status holds, per rank, a code and the step it had started (-1 for a rank that never ran), and
# ``raise_for_status`` turns it into an error that says who waited for whom, at which step.
stuck = rd.DeviceRing(N, slot_elems=SLOT, steps=STEPS, group_threads=GROUP)
stuck.abort()
d = cuda.to_device(x)
status = stuck.launch(d, d, spins_before_check=50, ranks_started=N - 1)
print("3. rank 2 never starts; the abort word is set")
print("   status (code, steps started) per rank", status[0].tolist())
try:
    rd.raise_for_status(status)
except CommAbortedError as error:
    print("   " + ";\n     ".join(str(error).split("; ")))  # one clause a line
print()

# %%
# 4. The spin in PTX
# ------------------
#
# ``wait_peer`` spins on the peer's counter. An ordinary load may be hoisted out of the loop by the compiler (it
# sees no one writing the counter), and the loop would spin on a stale register forever. The load is inline PTX
# with side effects: ``ld.volatile.global``, which reads memory on every turn. The simulator cannot compile to
# PTX, so a process of its own does, with a stand-in sm_90 device (Numba asks the driver for one; here there may
# be none). The code then finds the spin in the PTX: the smallest loop (a branch back to a label above it) with a
# volatile load inside, and prints it.
PTX = """
import numba.cuda.dispatcher as dispatcher

class Device:
    compute_capability = (9, 0)

dispatcher.get_current_device = lambda: Device()
from numba import cuda
from nbcoll.comm.algorithms import ring_device as rd

ptx, _ = cuda.compile_ptx(rd.ring_all_reduce_kernel.py_func, rd._signature("int32"), cc=(9, 0))
print(ptx)
"""
env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
env["NBCOLL_BACKEND"] = "cuda"
proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PTX)], env=env, capture_output=True, text=True)
if proc.returncode != 0 or ".entry" not in proc.stdout:
    last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    print(f"4. PTX compilation is not available here ({last[0][:200]}); the rest of the tutorial stands")
else:
    lines = proc.stdout.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\$L__\w+):", line))}
    # A loop is a branch back to a label above it; the spin is the smallest loop around a volatile load.
    loops = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             if (m := re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line)) and labels.get(m.group(1), i) < i]  # fmt: skip
    loads = [i for i, line in enumerate(lines) if "ld.volatile.global" in line]
    around = [(t, b) for t, b in loops if any(t < i < b for i in loads)]  # the first loads, before any loop, are
    top, bottom = min(around, key=lambda loop: loop[1] - loop[0])  # where the last call left the counters
    print(f"4. the spin of wait_peer in the kernel's PTX for sm_90 (lines {top + 1}-{bottom + 1} of {len(lines)}):")
    for line in lines[top : bottom + 1][:24]:
        print(f"   {line.rstrip()}")
    volatile = sum("ld.volatile.global" in line for line in lines)
    print("   the label at the top, the branch back to it at the bottom, the loads between: the u64 load reads")
    print("   the peer's counter on every turn, the u32 load the abort word every spins_before_check turns")
    print(f"   ({volatile} volatile loads in the whole kernel: each primitive's spins, inlined)")
print()

# %%
# Try it yourself
# ---------------
#
# The exercise: write one of these primitives, ``recv_reduce_send``, as a device function. Its check runs the
# ring all-reduce kernel above with your function in place of nbcoll's, on 2, 3 and 4 simulated ranks.

print("Try it yourself: python -m nbcoll exercise recv_reduce_send")
print("Done: one kernel ran the whole ring, and every rank holds NumPy's result")
