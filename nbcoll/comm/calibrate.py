"""``python -m nbcoll calibrate``: measure each transport's latency and bandwidth for the tuner.

Ranks 0 and 1 play ping-pong over each transport in turn (the others wait), at sizes from 8 bytes up to
``max_bytes``; half the round trip, the median over repeats, is one transfer. A least-squares line through
``seconds = alpha + bytes / beta`` gives the two parameters (:func:`nbcoll.comm.tuner.fit`), which rank 0
stores for this machine and backend.

Example::

    mpiexec -n 2 python -m nbcoll calibrate
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import tuner
from nbcoll.comm.communicator import Communicator
from nbcoll.comm.config import CommConfig


def ping_pong(comm: Communicator, nbytes: int, repeats: int) -> float:
    """Seconds for one transfer of ``nbytes`` between ranks 0 and 1 (half the median round trip)."""
    buf = nbcoll.to_device(np.zeros(nbytes, np.uint8))
    times = []
    for _ in range(repeats + 1):  # the first round trip warms up the connection
        start = time.perf_counter()
        if comm.rank == 0:
            comm.send(buf, 1)
            comm.recv(buf, 1)
        elif comm.rank == 1:
            comm.recv(buf, 0)
            comm.send(buf, 0)
        times.append((time.perf_counter() - start) / 2)
    return statistics.median(times[1:])


def measure(transport: str, max_bytes: int, repeats: int) -> tuple[list[int], list[float]]:
    config = dataclasses.replace(CommConfig.from_env(), transport=transport)
    comm = Communicator(MPI.COMM_WORLD, config)
    sizes, seconds = [], []
    size = 8
    while size <= max_bytes:
        sizes.append(size)
        seconds.append(ping_pong(comm, size, repeats))
        size *= 4
    comm.destroy()
    return sizes, seconds


def main(max_bytes: int = 4 << 20, repeats: int = 5) -> int:
    world = MPI.COMM_WORLD
    if world.Get_size() < 2:
        print("calibrate: needs at least 2 ranks; run: mpiexec -n 2 python -m nbcoll calibrate")
        return 2
    models = {}
    for transport in ("ipc", "mpi"):
        sizes, seconds = measure(transport, max_bytes, repeats)
        models[transport] = tuner.fit(sizes, seconds)
        if world.Get_rank() == 0:
            print(
                f"{transport}: alpha = {models[transport].alpha * 1e6:.1f} us, "
                f"beta = {models[transport].beta / 1e9:.3f} GB/s  ({nbcoll.get_backend()} backend)"
            )
            for size, sec in zip(sizes, seconds, strict=True):
                print(f"  {size:>10} B  {sec * 1e6:10.1f} us")
    if world.Get_rank() == 0:
        print(f"saved to {tuner.save_models(models)}")
    return 0
