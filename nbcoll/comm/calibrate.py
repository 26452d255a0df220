"""``python -m nbcoll calibrate``: measure, per transport, the parameters of the tuner's cost model.

For each transport in turn, every rank runs a fixed set of collectives and algorithms (``CALIBRATION``) at sizes
from 64 bytes up to ``max_bytes``, interleaved repeat by repeat so that every case sees the same machine noise; a
sample is the slowest rank's time, and the median of the repeats is kept. A weighted least-squares fit of
``seconds = gamma + steps x alpha + bytes / beta``, with the steps and bytes that
:func:`nbcoll.comm.tuner.cost_terms` counts for each case, gives the parameters
(:func:`nbcoll.comm.tuner.fit`), which rank 0 stores for this machine and backend. Every case calls with the same
buffers again and again, so the direct ones over the windows are replays, and give ``gamma_replay``.

Timing the collectives themselves, rather than a ping-pong, is what makes the parameters fit what they
predict: a point-to-point message pays a whole call's fixed cost per transfer, while a step inside a
collective does not.

Example::

    mpiexec -n 2 python -m nbcoll calibrate
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import tuner
from nbcoll.comm.algorithms import direct
from nbcoll.comm.communicator import Communicator
from nbcoll.comm.config import CommConfig

CALIBRATION = {
    "all_reduce": ("ring", "tree", "direct", "halving_doubling"),
    "broadcast": ("ring", "tree", "direct"),
    "all_gather": ("ring", "direct"),
    "all_to_all": ("pairwise", "direct"),
}
"""The collectives and algorithms timed: every term of the model varies across them."""
SIZES = (64, 4 << 10, 64 << 10, 1 << 20, 4 << 20)


def _call(comm: Communicator, collective: str, algo: str, nbytes: int) -> Callable[[], object]:
    count = max(1, nbytes // 4)
    send = nbcoll.to_device(np.ones(count, np.float32))
    if collective == "all_reduce":
        out = nbcoll.zeros(count, np.float32)
        return lambda: comm.all_reduce(send, out, algo=algo)
    if collective == "broadcast":
        out = nbcoll.zeros(count, np.float32)
        return lambda: comm.broadcast(send, out, root=0, algo=algo)
    if collective == "all_to_all":  # ``nbytes`` per rank's block, as the tuner counts it
        blocks = nbcoll.to_device(np.ones(count * comm.size, np.float32))
        out = nbcoll.zeros(count * comm.size, np.float32)
        return lambda: comm.all_to_all(blocks, out, algo=algo)
    out = nbcoll.zeros(count * comm.size, np.float32)
    return lambda: comm.all_gather(send, out, algo=algo)


def calls_per_sample(nbytes: int) -> int:
    """Calls one sample times: enough to move about 8 MiB, from 1 to 20 (nccl-tests also times a loop of iterations).

    A single call right after the barrier would time the barrier's uneven exit (a few to tens of microseconds on
    a busy machine) as much as the call itself.
    """
    return max(1, min(20, (8 << 20) // max(nbytes, 1)))


def _sample(world: MPI.Comm, call: Callable[[], object], inner: int) -> float:
    world.Barrier()
    start = time.perf_counter()
    for _ in range(inner):
        call()
    return world.allreduce((time.perf_counter() - start) / inner, op=MPI.MAX)


def measure(transport: str, max_bytes: int, repeats: int) -> tuple[list[tuple[str, str, int]], list[float], int]:
    """Median seconds of every calibration case over ``transport``; also the window size the direct steps used."""
    world = MPI.COMM_WORLD
    config = dataclasses.replace(CommConfig.from_env(), transport=transport)
    comm = Communicator(world, config)
    cases = [(c, a, s) for s in SIZES if s <= max(max_bytes, 64) for c, algos in CALIBRATION.items() for a in algos]
    calls = [_call(comm, *case) for case in cases]
    for call in calls:  # warm-up: connections, windows, first touch of pages
        call()
    inner = [calls_per_sample(size) for *_, size in cases]
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(repeats):
        for i, call in enumerate(calls):
            samples[i].append(_sample(world, call, inner[i]))
    # every pair on ipc: direct steps use windows
    windows = direct.window_bytes(config.buffsize, comm.size) if transport == "ipc" else 0
    comm.destroy()
    return cases, [statistics.median(s) for s in samples], windows


def fit_transport(transport: str, max_bytes: int, repeats: int) -> tuple[tuner.LinkModel, list[str]]:
    """The fitted model of one transport, and one line per case (measured and predicted) for the report."""
    world = MPI.COMM_WORLD
    cases, seconds, windows = measure(transport, max_bytes, repeats)
    config = CommConfig.from_env()
    chunk, nch, ll = config.chunk_bytes, config.nchannels, config.ll_bytes if windows else 0  # as the calls ran
    n = world.Get_size()
    terms = [tuner.cost_terms(c, a, s, n, chunk, windows, nch, ll) for c, a, s in cases]
    again = [tuner.replayed(c, a, n, windows) for c, a, _ in cases]  # every call repeats its buffers
    model = tuner.fit([t[0] for t in terms], [t[1] for t in terms], seconds, again)
    check = dataclasses.replace(model, window_bytes=windows, channels=nch, ll_bytes=ll)
    lines = [
        f"  {c:>10} {a:<16} {s:>9} B  {sec * 1e6:9.1f} us measured, "
        f"{tuner.estimate(c, a, s, world.Get_size(), chunk, check) * 1e6:9.1f} predicted"
        for (c, a, s), sec in zip(cases, seconds, strict=True)
    ]
    return model, lines


def main(max_bytes: int = 4 << 20, repeats: int = 5) -> int:
    world = MPI.COMM_WORLD
    if world.Get_size() < 2:
        print("calibrate: needs at least 2 ranks; run: mpiexec -n 2 python -m nbcoll calibrate")
        return 2
    models = {}
    for transport in ("ipc", "mpi"):
        models[transport], lines = fit_transport(transport, max_bytes, repeats)
        if world.Get_rank() == 0:
            m = models[transport]
            print(
                f"{transport}: alpha = {m.alpha * 1e6:.1f} us, beta = {m.beta / 1e9:.3f} GB/s, "
                f"gamma = {m.gamma * 1e6:.1f} us, replayed {(m.gamma_replay or m.gamma) * 1e6:.1f} us  "
                f"({nbcoll.get_backend()} backend, {world.Get_size()} ranks)"
            )
            print("\n".join(lines))
    if world.Get_rank() == 0:
        print(f"saved to {tuner.save_models(models)}")
    return 0
