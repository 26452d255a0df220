"""
Point-to-point: send and recv, IPC handles, and a FIFO with credits
===================================================================

How two ranks exchange messages: send and recv, what a CUDA IPC handle is, and how a FIFO with credits moves a
large message.

What you learn here:

- ``comm.send(buf, peer)`` and ``comm.recv(buf, peer)``: the receiver's buffer must hold exactly the bytes sent;
- what an IPC handle is: a small, picklable description of memory that another process on the same node can map
  (a CUDA IPC handle on a GPU, a POSIX shared-memory name on the simulator and NumPy backends), so that one
  process's kernel writes straight into its peer's memory;
- how a connection moves a message much larger than its buffer: a FIFO of a few slots in the receiver's memory,
  a step counter on each side, and credits, exactly as NCCL does. Every step is printed.

Run it with ``python tutorials/06_point_to_point_and_ipc.py``: it re-launches itself on 2 ranks.
"""

# %%
# Set-up
# ------
#
# ``relaunch(2)`` runs this script again on 2 ranks under ``mpiexec``; everything after it runs on both. Rank 0
# is the sender and rank 1 the receiver throughout; each rank's ``peer`` is the other one. Each rank first
# prints the backend it runs on and its rank.

import dataclasses
import time

import nbcoll.launch

nbcoll.launch.relaunch(2)

# Everything below runs on each of the 2 ranks.
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll.comm import init  # noqa: E402
from nbcoll.ipc_memory import IpcBuffer  # noqa: E402
from nbcoll.kernels import copy as copy_kernels  # noqa: E402

comm = init()
rank, peer = comm.rank, 1 - comm.rank
print(f"Tutorial 06 on the {nbcoll.get_backend()!r} backend, rank {rank} of {comm.size}")

# %%
# 1. send and recv
# ----------------
#
# Rank 0 sends 8 floats; rank 1 receives them into a buffer of the same size. Both calls return when the bytes
# have moved (a send of a small message returns as soon as it sits in the receiver's FIFO). Rank 0 says what it
# sent, rank 1 prints what arrived: the 8 values of ``np.linspace(0, 1, 8)``.

if rank == 0:
    comm.send(nbcoll.to_device(np.linspace(0, 1, 8, dtype=np.float32)), peer)
    print("1. sent 8 floats to rank 1")
else:
    got = nbcoll.zeros(8, np.float32)
    comm.recv(got, peer)
    print(f"1. received from rank 0: {nbcoll.to_host(got)}")

# %%
# 2. An IPC handle
# ----------------
#
# Rank 0 allocates a buffer that other processes can map and passes its handle, a few bytes, over MPI. Rank 1
# opens it: from then on both processes see the same memory. The owner unlinks the name as soon as the peer has
# it mapped, so nothing is left in ``/dev/shm`` even if a process is killed.
#
# Rank 0 prints its handle (here a shared-memory name, which changes from run to run), rank 1 writes
# ``[7 8 9 10]`` into the mapped buffer with a kernel, and after a barrier rank 0 finds those values in its own
# memory, without any message carrying them.

mpi = MPI.COMM_WORLD
owner = IpcBuffer.create(4, np.int32, tag="tutorial") if rank == 0 else None
handle = mpi.bcast(owner.handle if owner else None, root=0)
shared = owner if rank == 0 else IpcBuffer.open(handle)
mpi.Barrier()
if rank == 0:
    owner.unlink()
    print(f"2. my IPC handle: kind={handle.kind!r}, name={handle.name!r}, shape={handle.shape}, dtype={handle.dtype}")
    print("   (on a GPU the handle carries cuIpcGetMemHandle's 64 bytes;")
    print("    a peer's kernel then writes into my memory)")
else:
    copy_kernels.copy(shared.array, nbcoll.to_device(np.array([7, 8, 9, 10], np.int32)))
    nbcoll.synchronize()  # a GPU kernel runs asynchronously: it must be done before the barrier lets rank 0 read
    print("2. opened rank 0's buffer from its handle and wrote [7 8 9 10] into it with the copy kernel")
mpi.Barrier()
if rank == 0:
    print(f"   rank 0 reads its own buffer: {nbcoll.to_host(shared.array)}")
shared.close()

# %%
# 3. The FIFO and its credits, step by step
# -----------------------------------------
#
# A communicator with a tiny FIFO: 4 slots of 64 bytes (``NBCOLL_BUFFSIZE=256``, ``NBCOLL_STEPS=4``). The message
# is 10 slots long. The sender may run at most 4 chunks ahead of the receiver: each free slot is a credit. To make
# that visible, the receiver here is slow on purpose: it reads nothing until the sender tells it the FIFO is full.
#
# Both sides log what they do with a clock all processes of a machine share, and rank 0 prints the two logs as
# one, in time order, so the whole story is in rank 0's output; rank 1 only says that it took part. Each
# counter counts whole chunks, so after chunk ``k`` both sides say ``k + 1``. Follow the slots: the sender fills
# slots 0 to 3, then waits (the indented line under a wait gives the counters behind it); each slot the receiver
# hands back is a credit that lets the sender write one more chunk, into the slot just freed. How the two sides
# interleave changes from run to run; the order on each side, and the credit rule, never do.

small = dataclasses.replace(comm.config, buffsize=256, steps=4)
fifo_comm = init(config=small)
chunk_floats = small.chunk_bytes // 4
message = np.arange(10 * chunk_floats, dtype=np.float32)
print(
    f"3. FIFO of {small.steps} slots x {small.chunk_bytes} bytes; a message of {message.nbytes} bytes "
    f"= {message.nbytes // small.chunk_bytes} chunks"
)
log: list[tuple[float, str]] = []
if rank == 0:
    conn = fifo_comm.send_connection(peer)
    data = nbcoll.to_device(message)
    for k in range(10):
        if not conn.ready():
            what, _, state = conn.waiting_for().partition(": ")  # "a free FIFO slot (credit)", then the counters
            log.append((time.monotonic(), f"sender    before chunk {k}: waiting for {what}:\n{' ' * 11}{state}"))
            if k == small.steps:  # the FIFO is full: tell the receiver, which has read nothing yet, to begin
                MPI.COMM_WORLD.send("full", dest=peer, tag=6)
            while not conn.ready():
                time.sleep(0.001)
        slot = k % small.steps
        written = time.monotonic()  # read before publishing, so it sorts before the receiver's read of it
        conn.send_chunk(data[k * chunk_floats : (k + 1) * chunk_floats], last=k == 9)
        log.append((written, f"sender    chunk {k} written into slot {slot} and published ({conn.step} published)"))
else:
    conn = fifo_comm.recv_connection(peer)
    out = nbcoll.zeros(message.size, np.float32)
    full = MPI.COMM_WORLD.irecv(source=peer, tag=6)  # a slow receiver: it begins once the sender waits for credits
    deadline = time.monotonic() + comm.config.timeout  # every wait is bounded, this one too
    while not full.test()[0]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: rank {peer} did not fill the FIFO within {comm.config.timeout:g} s")
        time.sleep(0.001)
    for k in range(10):
        while not conn.ready():
            time.sleep(0.001)
        slot = k % small.steps
        with conn.recv_chunk() as chunk:
            copy_kernels.copy(out[k * chunk_floats : (k + 1) * chunk_floats], chunk.view(np.float32))
            read = f"receiver  chunk {k} read from slot {slot} ({chunk.nbytes} bytes, last={chunk.last})"
            log.append((time.monotonic(), read))
            handed_back = time.monotonic()  # read before the slot is freed, so it sorts before the sender's use of it
        log.append((handed_back, f"receiver  slot {slot} handed back: a credit for the sender ({conn.step} consumed)"))
    assert np.array_equal(nbcoll.to_host(out), message)
logs = MPI.COMM_WORLD.gather(log, root=0)
if rank == 0:
    for _, line in sorted(logs[0] + logs[1]):
        print("   " + line.replace("\n", "\n   "))
    print("   the message arrived whole")
else:
    print("   (my side of the exchange is in rank 0's output: it prints both logs as one, in time order)")

# %%
# 4. The same message with ``comm.send``
# --------------------------------------
#
# ``comm.send`` does all of this for you, for any size, and counts what it moved: each rank prints its own
# counters, so the 640 bytes show up as sent on rank 0 and as received on rank 1, in the same 10 chunks.

fifo_comm.reset_counters()
if rank == 0:
    fifo_comm.send(nbcoll.to_device(message), peer)
else:
    fifo_comm.recv(out, peer)
c = fifo_comm.counters
print(
    f"4. comm.send/recv of the same message: {c.bytes_sent} bytes sent, {c.bytes_received} received, "
    f"in {c.chunks_sent + c.chunks_received} chunks"
)

fifo_comm.destroy()
comm.destroy()
print("Done.")
