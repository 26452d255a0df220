"""Fault injection: ``comm_faults.py MODE`` with MODE one of

* ``norecv``: rank 1 never posts its receive; rank 0's send of 10x the FIFO must raise CommTimeoutError;
* ``exit``: rank 1 exits in the middle of receiving from rank 0, and rank 2 in the middle of sending to rank 3;
  their peers must raise within the timeout;
* ``abort``: ranks > 0 wait for messages that never come; rank 0 aborts, and every wait must end promptly.

Every rank prints ``pid=...`` first; a rank that saw what it should prints ``<MODE> ok``.
"""

import atexit
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import CommAbortedError, CommError, CommPeerLostError, CommTimeoutError, init

print(f"pid={os.getpid()}", flush=True)
mode = sys.argv[1]
comm = init()
rank, size = comm.rank, comm.size
timeout = comm.config.timeout
count = 10 * comm.config.buffsize // 4
message = nbcoll.to_device(np.arange(count, dtype=np.float32))


def expect(error, call, *words):
    start = time.monotonic()
    try:
        call()
    except error as exc:
        elapsed = time.monotonic() - start
        text = str(exc)
        missing = [w for w in words if w not in text]
        assert not missing, f"rank {rank}: {error.__name__} lacks {missing}:\n{text}"
        print(f"rank {rank}: {error.__name__} after {elapsed:.2f} s:\n{text}", flush=True)
        return elapsed
    raise AssertionError(f"rank {rank}: expected {error.__name__}")


def leave_now():
    """Exit now, with status 0, but without MPI_Finalize: it would wait for the rank that is gone.

    ``sys.exit`` lets the launcher record the status; the exit hook registered last runs first, before MPI's.
    """
    sys.stdout.flush()
    atexit.register(os._exit, 0)
    sys.exit(0)


def receive_some_then_exit(peer, chunks):
    conn = comm.recv_connection(peer)
    for _ in range(chunks):
        while not conn.ready():
            time.sleep(0.001)
        conn.release()
    print(f"rank {rank}: exiting after {chunks} chunks", flush=True)
    leave_now()


def send_some_then_exit(peer, chunks):
    conn = comm.send_connection(peer)
    part = nbcoll.to_device(np.ones(conn.chunk_bytes // 4, np.float32))
    for _ in range(chunks):
        while not conn.ready():
            time.sleep(0.001)
        conn.send_chunk(part, last=False)
    print(f"rank {rank}: exiting after {chunks} chunks", flush=True)
    leave_now()


if mode == "norecv":
    if rank == 0:
        elapsed = expect(
            CommTimeoutError,
            lambda: comm.send(message, 1),
            "rank 0",
            "peer 1",
            "send",
            "step",
            "waiting for",
            "flight recorder",
            "NBCOLL_TIMEOUT",
        )
        assert timeout <= elapsed < timeout + 5, elapsed
        print("norecv ok", flush=True)
    MPI.COMM_WORLD.Barrier()  # rank 1 "never posts": it waits here until rank 0 has given up
    leave_now()  # unmatched chunks stay on the wire: MPI_Finalize would wait for them

elif mode == "exit":
    if rank == 1:
        receive_some_then_exit(0, chunks=3)
    elif rank == 2 and size > 3:
        send_some_then_exit(3, chunks=3)
    elif rank == 0:
        elapsed = expect(CommPeerLostError, lambda: comm.send(message, 1), "peer rank 1", "exited", "send")
        assert elapsed < timeout, elapsed
        print("exit ok", flush=True)
    elif rank == 3:
        out = nbcoll.zeros(count, np.float32)
        elapsed = expect(CommPeerLostError, lambda: comm.recv(out, 2), "peer rank 2", "exited", "recv")
        assert elapsed < timeout, elapsed
        print("exit ok", flush=True)
    leave_now()

elif mode == "abort":
    if rank == 0:
        time.sleep(1.0)
        comm.abort()
        expect(CommAbortedError, lambda: comm.send(message, 1), "aborted by this rank")
    else:
        out = nbcoll.zeros(4, np.float32)
        elapsed = expect(CommAbortedError, lambda: comm.recv(out, 0), "aborted by rank 0", "recv from peer 0")
        assert elapsed < timeout / 2, elapsed
        expect(CommAbortedError, lambda: comm.send(out, 0), "aborted by rank 0")
        assert isinstance(CommAbortedError("x"), CommError)
        # Carry on without rank 0: shrink the aborted communicator, then pass a ring of messages.
        survivors = comm.shrink([0])
        assert (survivors.rank, survivors.size) == (rank - 1, size - 1)
        if survivors.size > 1:
            token, received = nbcoll.to_device(np.full(3, survivors.rank, np.int32)), nbcoll.zeros(3, np.int32)
            left = (survivors.rank - 1) % survivors.size
            with survivors.group():
                survivors.send(token, (survivors.rank + 1) % survivors.size)
                survivors.recv(received, left)
            assert np.all(nbcoll.to_host(received) == left), nbcoll.to_host(received)
            print(f"rank {rank}: shrunk communicator passed a ring", flush=True)
        survivors.destroy()
    comm.destroy()
    print("abort ok", flush=True)
