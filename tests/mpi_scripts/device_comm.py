"""The device all-reduce (one ring kernel per rank, spinning on its neighbours' counters) under mpiexec.

``mpiexec -n N python device_comm.py [--faults]``: every rank prints ``pid=...`` first, then runs every case on
one launch: the device all-reduce against the host ring (dtypes, ops, sizes, several FIFO rounds through a
tiny chunk, NBCOLL_PROTO=device as a setting), then all-gather, reduce-scatter, broadcast and reduce likewise
(integers, every root); with ``--faults``, then a stalled root of a broadcast and a stalled last rank of an
all-reduce (every survivor's kernel must return and raise CommTimeoutError within NBCOLL_TIMEOUT + MARGIN) and a
last rank that exits (every survivor raises CommPeerLostError naming it). Each rank prints ``device cases ok`` at
the end.
"""

from __future__ import annotations

import atexit
import glob
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import CommPeerLostError, CommTimeoutError, init
from nbcoll.comm.config import CommConfig

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
MARGIN = 4.0
print(f"pid={os.getpid()}", flush=True)


def leave_now(status: int = 0) -> None:
    """Exit without MPI_Finalize, which would wait for a rank that is gone or stopped."""
    sys.stdout.flush()
    atexit.register(os._exit, status)
    sys.exit(status)


def own_segments() -> list[str]:
    return glob.glob(f"/dev/shm/nbcoll_{os.getpid()}_*")


def inputs(count: int, dtype, seed: int) -> np.ndarray:
    """This rank's input: small integers (exact under every op), or floats with a fractional part."""
    rng = np.random.default_rng(seed * 100 + RANK)
    x = rng.integers(-3, 4, size=count)
    if np.issubdtype(dtype, np.floating):
        x = x + rng.random(count)
    return x.astype(dtype)


def check_against_host(comm, count: int, dtype, op: str, seed: int, in_place: bool) -> None:
    x = inputs(count, dtype, seed)
    host = comm.all_reduce(nbcoll.to_device(x.copy()), op=op, algo="ring")  # the host-driven ring
    if in_place:
        device = comm.all_reduce(nbcoll.to_device(x.copy()), op=op, algo="ring", proto="device")
    else:
        sendbuf, device = nbcoll.to_device(x.copy()), nbcoll.to_device(np.zeros_like(x))
        comm.all_reduce(sendbuf, device, op=op, proto="device")
        np.testing.assert_array_equal(nbcoll.to_host(sendbuf), x)  # the input is untouched
    host, device = nbcoll.to_host(host), nbcoll.to_host(device)
    what = f"count {count} {np.dtype(dtype).name} {op}"
    if np.issubdtype(dtype, np.integer):
        np.testing.assert_array_equal(device, host, err_msg=what)
    else:
        np.testing.assert_allclose(device, host, rtol=1e-5 if dtype == np.float32 else 1e-12, err_msg=what)
    everyone = WORLD.allgather(device.tobytes())
    assert all(e == everyone[0] for e in everyone), f"{what}: the ranks' results differ"


def correctness_cases() -> None:
    # 64-byte chunks in 4-slot FIFOs, 2 channels: 37 elements take a round or two per channel.
    comm = init(config=CommConfig(buffsize=256, steps=4, nchannels=2, timeout=30.0))
    start = time.monotonic()
    for i, count in enumerate([0, 1, 5, 37]):
        check_against_host(comm, count, np.int64, "sum", seed=i, in_place=True)
        check_against_host(comm, count, np.float32, "sum", seed=10 + i, in_place=False)
    for j, (dtype, op) in enumerate([(np.int32, "prod"), (np.float64, "max"), (np.int64, "min")]):
        check_against_host(comm, 13, dtype, op, seed=20 + j, in_place=j % 2 == 0)
    assert not own_segments(), f"rank {RANK}: names left after the device set-up: {own_segments()}"
    device = comm.engine.device
    assert device.fallback == "", device.fallback  # the kernel ran, not the host ring in its place
    tail = nbcoll.to_host(device.counters[0])[0]  # steps posted into this rank's FIFOs, never reset
    assert tail.sum() > 0, tail
    comm.destroy()
    print(f"rank {RANK}: counts, dtypes and ops ok in {time.monotonic() - start:.1f} s", flush=True)

    # An 8-byte chunk in 2 slots on one channel: 37 elements are many FIFO rounds of n one-element blocks.
    comm = init(config=CommConfig(buffsize=16, steps=2, nchannels=1, timeout=30.0))
    check_against_host(comm, 37, np.int64, "sum", seed=30, in_place=True)
    check_against_host(comm, 37, np.float64, "sum", seed=31, in_place=False)
    comm.destroy()

    # NBCOLL_PROTO=device: every all-reduce the kernel serves runs on it, the others stay on the host.
    comm = init(config=CommConfig(buffsize=256, steps=4, nchannels=1, timeout=30.0, proto="device"))
    x = nbcoll.to_device(np.full(7, RANK + 1, np.int32))
    comm.all_reduce(x)
    assert comm.engine.device is not None and np.all(nbcoll.to_host(x) == SIZE * (SIZE + 1) // 2)
    y = nbcoll.to_device(np.full(3, float(RANK), np.float32))
    comm.all_reduce(y, op="avg")  # not the kernel's: the host ring
    np.testing.assert_allclose(nbcoll.to_host(y), (SIZE - 1) / 2)
    comm.destroy()
    print(f"rank {RANK}: rounds and NBCOLL_PROTO ok", flush=True)


def run_both(comm, collective: str, count: int, seed: int, root: int = 0, op: str = "sum", in_place: bool = False):
    """``collective`` on the host-driven ring and with proto="device" on the same int64 inputs; both results."""
    x = inputs(count * (SIZE if collective == "reduce_scatter" else 1), np.int64, seed)
    results = []
    for proto in (None, "device"):
        send = nbcoll.to_device(x.copy())
        if collective == "all_gather":
            full = np.zeros(count * SIZE, np.int64)
            full[RANK * count : (RANK + 1) * count] = x
            recv = nbcoll.to_device(full)
            if in_place:  # this rank's input is its own block of recvbuf
                send = recv[RANK * count : (RANK + 1) * count]
            comm.all_gather(send, recv, algo="ring", proto=proto)
        elif collective == "reduce_scatter":
            recv = send[RANK * count : (RANK + 1) * count] if in_place else nbcoll.to_device(np.full(count, 99))
            comm.reduce_scatter(send, recv, op=op, algo="ring", proto=proto)
        elif collective == "broadcast":
            recv = send if in_place else nbcoll.to_device(np.zeros(count, np.int64))
            comm.broadcast(send, None if in_place else recv, root=root, algo="ring", proto=proto)
        else:
            recv = send if in_place else nbcoll.to_device(np.full(count, 99))  # off the root it stays 99
            comm.reduce(send, None if in_place else recv, op=op, root=root, algo="ring", proto=proto)
        results.append(nbcoll.to_host(recv).copy())
    what = f"{collective} count {count} root {root} {op} in_place={in_place}"
    np.testing.assert_array_equal(results[1], results[0], err_msg=what)
    return results


def collective_cases() -> None:
    """all_gather, reduce_scatter, broadcast and reduce with proto="device" equal the host ring, to the element."""
    comm = init(config=CommConfig(buffsize=256, steps=4, nchannels=2, timeout=30.0))
    start = time.monotonic()
    ops = ["sum", "min", "prod", "sum"]
    for i, count in enumerate([0, 1, 5, 37]):  # with the rounds below, every root has a count > 0 on 2, 3, 4 ranks
        run_both(comm, "all_gather", count, seed=40 + i, in_place=i == 3)
        run_both(comm, "reduce_scatter", count, seed=50 + i, op="max" if i == 2 else "sum", in_place=i == 3)
        run_both(comm, "broadcast", count, seed=60 + i, root=i % SIZE, in_place=i == 1)
        run_both(comm, "reduce", count, seed=70 + i, root=(i + 1) % SIZE, op=ops[i], in_place=i == 2)
    assert comm.engine.device.fallback == "", comm.engine.device.fallback
    comm.destroy()
    # An 8-byte chunk in 2 slots on one channel: 9 elements per block are many FIFO rounds; a setting, not a request.
    comm = init(config=CommConfig(buffsize=16, steps=2, nchannels=1, timeout=30.0, proto="device"))
    for collective, root in [("all_gather", 0), ("reduce_scatter", 0), ("broadcast", 0), ("reduce", 1)]:
        run_both(comm, collective, 9, seed=100, root=root)
    y = nbcoll.to_device(np.full(3, float(RANK), np.float32))
    comm.reduce(y, op="avg", root=0)  # not the kernel's: the host ring
    if RANK == 0:
        np.testing.assert_allclose(nbcoll.to_host(y), (SIZE - 1) / 2)
    comm.destroy()
    print(f"rank {RANK}: the other collectives ok in {time.monotonic() - start:.1f} s", flush=True)


def expect_failure(comm, error_type, peer_named: int | None, timeout: float, collective: str = "all_reduce") -> None:
    x = nbcoll.to_device(np.ones(37, np.float32))
    start = time.monotonic()
    try:
        if collective == "all_reduce":
            comm.all_reduce(x, proto="device")
        else:  # a broadcast from the last rank: every survivor waits for its chunk, passed down the chain
            comm.broadcast(x, root=SIZE - 1, proto="device")
    except error_type as error:
        elapsed = time.monotonic() - start
        print(f"rank {RANK}: {type(error).__name__} after {elapsed:.1f} s: {error}", flush=True)
        assert elapsed < timeout + MARGIN, f"rank {RANK}: the kernel returned only after {elapsed:.1f} s"
        assert peer_named is None or f"rank {peer_named}" in str(error), str(error)
        assert collective in str(error) and "(ring, device)" in str(error) and "step" in str(error), str(error)
    else:
        raise AssertionError(f"rank {RANK}: the {collective} returned without its last rank")


def fault_cases(timeout: float) -> None:
    last = SIZE - 1
    # A stalled last rank: it waits elsewhere instead of calling; the survivors' kernels stop at NBCOLL_TIMEOUT.
    comm = init(config=CommConfig(buffsize=256, steps=2, nchannels=1, timeout=timeout))
    comm.all_reduce(nbcoll.to_device(np.ones(5, np.float32)), proto="device")  # set up with every rank
    if RANK != last:  # the last rank goes straight to the barrier: to the ring, it never comes
        # The rank after the stalled one waited for its chunk; the others for whichever neighbour stopped first.
        expect_failure(comm, CommTimeoutError, last if RANK == 0 else None, timeout)
    WORLD.Barrier()
    comm.destroy()
    # A last rank that exits: every survivor names it, long before NBCOLL_TIMEOUT.
    comm = init(config=CommConfig(buffsize=256, steps=2, nchannels=1, timeout=60.0))
    comm.all_reduce(nbcoll.to_device(np.ones(5, np.float32)), proto="device")
    WORLD.Barrier()
    if RANK == last:
        leave_now(0)
    expect_failure(comm, CommPeerLostError, last, timeout)
    assert not own_segments(), own_segments()
    print(f"rank {RANK}: stalled and exited peers ok", flush=True)


def broadcast_fault_case(timeout: float) -> None:
    # A stalled root: the survivors' broadcast kernels stop at NBCOLL_TIMEOUT, the one after the root naming it.
    comm = init(config=CommConfig(buffsize=256, steps=2, nchannels=1, timeout=timeout))
    comm.broadcast(nbcoll.to_device(np.ones(5, np.float32)), root=0, proto="device")  # set up with every rank
    if RANK != SIZE - 1:
        expect_failure(comm, CommTimeoutError, SIZE - 1 if RANK == 0 else None, timeout, "broadcast")
    WORLD.Barrier()
    comm.destroy()
    print(f"rank {RANK}: stalled broadcast root ok", flush=True)


if __name__ == "__main__":
    correctness_cases()
    collective_cases()
    if "--faults" in sys.argv:
        broadcast_fault_case(float(os.environ.get("FAULT_TIMEOUT", "3")))
        fault_cases(float(os.environ.get("FAULT_TIMEOUT", "3")))
    print("device cases ok", flush=True)
    leave_now(0)
