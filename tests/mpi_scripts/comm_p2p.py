"""Point-to-point on every rank count: bad input, every dtype and size in a ring, big messages, counters.

Run under mpiexec; prints ``pid=...`` first and ``p2p ok`` last on every rank. Sizes follow the backend: tiny on
``sim``, up to tens of MiB on ``numpy``.
"""

import dataclasses
import os
import sys

import numpy as np

import nbcoll
from nbcoll.comm import CommConfig, CommMismatchError, init
from nbcoll.memory import DTYPES

print(f"pid={os.getpid()}", flush=True)
comm = init()
rank, size = comm.rank, comm.size
sim = nbcoll.get_backend() == "sim"
expected_transports = sys.argv[1] if len(sys.argv) > 1 else ""  # e.g. "ipc,mpi,mpi" for peers in rank order


def check(condition, what):
    if not condition:
        raise AssertionError(f"rank {rank}: {what}")


def raises(error, call, *words):
    try:
        call()
    except error as exc:
        message = str(exc)
        check(all(w in message for w in words), f"{error.__name__} message {message!r} lacks {words}")
        return
    raise AssertionError(f"rank {rank}: expected {error.__name__} from {call}")


def pattern(count, dtype, seed):
    """Random bits of every kind (NaNs, infinities, denormals included), so that equality is bit for bit."""
    nbytes = count * np.dtype(dtype).itemsize
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).view(dtype)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


# -- topology --------------------------------------------------------------------------------------------------
print(comm.topology.describe(), flush=True)
if expected_transports:
    peers = [p for p in range(size) if p != rank]
    got = ",".join(comm.transport_to(p) for p in peers)
    check(got == expected_transports.split("|")[rank], f"transports {got} != {expected_transports}")
check(sum(comm.topology.node_of[r] == comm.node for r in range(size)) == comm.local_size, "local_size")

# -- bad input touches nothing ---------------------------------------------------------------------------------
x = nbcoll.to_device(np.arange(4, dtype=np.float32))
before = comm.counters.as_dict(), comm.recorder.count
raises(ValueError, lambda: comm.send(x, rank), "itself")
raises(ValueError, lambda: comm.recv(x, size), "out of range")
raises(ValueError, lambda: comm.send(x, -1), "out of range")
raises(TypeError, lambda: comm.send(x, 0.5), "int")
wrong_backend = [1.0, 2.0] if not sim else np.zeros(3, np.float32)
raises(TypeError, lambda: comm.send(wrong_backend, (rank + 1) % size), "buf")
if nbcoll.get_backend() == "numpy":
    raises(ValueError, lambda: comm.send(np.zeros((4, 4), np.float32)[:, 1], (rank + 1) % size), "contiguous")
check((comm.counters.as_dict(), comm.recorder.count) == before, "bad input changed the counters or recorder")
closed = comm.dup()
closed.destroy()
raises(ValueError, lambda: closed.send(x, (rank + 1) % size), "destroyed")
check(closed.closed, "closed")

# -- rings of sendrecv in a group, every dtype and size --------------------------------------------------------
if size > 1:
    right, left = (rank + 1) % size, (rank - 1) % size
    small = dataclasses.replace(CommConfig.from_env(), buffsize=1024 if sim else 4096, steps=4)
    fifo_comm = init(config=small)
    fifo = small.buffsize
    counts_of = {
        # element counts: empty, one, odd byte counts, several FIFOs, and 10x the FIFO
        "sim": lambda item: [0, 1, 37],
        "numpy": lambda item: [0, 1, 3, 1001, (5 * fifo) // (2 * item) + 1, 10 * fifo // item],
    }["sim" if sim else "numpy"]
    fifo_comm.reset_counters()
    sent_bytes = 0
    for d, dtype in enumerate(DTYPES):
        for count in counts_of(dtype.itemsize):
            data = pattern(count, dtype, seed=1000 * rank + 10 * d + count)
            out = nbcoll.zeros(count, dtype)
            with fifo_comm.group():
                fifo_comm.recv(out, left)
                fifo_comm.send(nbcoll.to_device(data), right)
            expected = pattern(count, dtype, seed=1000 * left + 10 * d + count)
            check(same_bits(nbcoll.to_host(out), expected), f"ring {dtype}[{count}] differs")
            sent_bytes += data.nbytes
    c = fifo_comm.counters
    if size == 2:
        check(c[right].bytes_sent == sent_bytes and c[right].bytes_received == sent_bytes, f"counters {c}")
    else:
        check(c[right].bytes_sent == sent_bytes and c[right].bytes_received == 0, f"counters {c}")
        check(c[left].bytes_received == sent_bytes and c[left].bytes_sent == 0, f"counters {c}")
    check(c.bytes_sent == sent_bytes == c.bytes_received, f"total counters {c}")
    check(c.chunks_sent == c.chunks_received, f"chunk counters {c}")
    print(f"ring of {len(DTYPES)} dtypes ok, {sent_bytes} bytes, {c.chunks_sent} chunks", flush=True)

    # A message 10x the FIFO, outside a group: the lower rank of each pair sends first, the other receives first.
    if sim:
        count = 10 * fifo // 4
        big_comm = fifo_comm
    else:
        big_comm = comm
        count = 10 * comm.config.buffsize // 4  # 10 x 4 MiB of float32 by default
    partner = rank ^ 1
    if partner < size:
        message = pattern(count, np.float32, seed=rank)
        out = nbcoll.zeros(count, np.float32)
        big_comm.reset_counters()
        if rank < partner:
            big_comm.send(nbcoll.to_device(message), partner)
            big_comm.recv(out, partner)
        else:
            big_comm.recv(out, partner)
            big_comm.send(nbcoll.to_device(message), partner)
        check(same_bits(nbcoll.to_host(out), pattern(count, np.float32, seed=partner)), "big message differs")
        chunks = -(-message.nbytes // big_comm.config.chunk_bytes)
        c = big_comm.counters
        check(c.bytes_sent == message.nbytes and c[partner].chunks_sent == chunks, f"big counters {c}")
        print(f"big message ok: {message.nbytes} bytes in {chunks} chunks", flush=True)

    # A receive buffer of the wrong size is named, not silently filled.
    mismatch = fifo_comm.dup()
    if rank == 0:
        mismatch.send(nbcoll.to_device(np.ones(10, np.float32)), 1)
    elif rank == 1:
        raises(CommMismatchError, lambda: mismatch.recv(nbcoll.zeros(12, np.float32), 0), "40 bytes", "48 bytes")
    mismatch.destroy()
    fifo_comm.destroy()

comm.destroy()
print("p2p ok", flush=True)
