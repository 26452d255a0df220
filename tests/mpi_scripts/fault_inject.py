"""Fault injection: one rank exits, stops or raises at a chosen point of a collective, and the others must cope.

``mpiexec -n N python fault_inject.py --seed S --cases K [--ops all_reduce:ring,...] [--kinds exit,stop,raise]``
runs ``K`` cases drawn with seed ``S`` (every rank draws the same ones); ``--plan op/fault/point/victim;...``
runs the cases listed instead (``benchmarks/fault_sweep.py`` sweeps them all). A case picks an operation (a collective
with one of its algorithms, a ring of sends and receives, or a group of two collectives), a victim rank, a
fault and a point:

* ``exit``: the victim calls ``os._exit`` (no clean-up of any kind: as a crash);
* ``stop``: the victim sends itself ``SIGSTOP`` (a hung process: alive, but silent); a survivor resumes it
  with ``SIGCONT`` once every survivor is done, and it then raises;
* ``raise``: the victim raises an exception, as a bug in user code or in nbcoll would;

at point ``-1`` (before it calls the operation: it never comes) or ``k >= 0`` (after its ``k``-th chunk sent,
chunk received, window step or LL step). Each case runs on a communicator of its own. Every survivor must either finish
the operation or raise a :class:`~nbcoll.comm.CommError` that names its rank, within ``NBCOLL_TIMEOUT`` plus
``--margin`` seconds, and no ``/dev/shm`` name of any rank may be left after the case. After an ``exit`` the
survivors carry on among themselves, so one launch covers every rank count from N down to 2.

Each rank prints ``pid=...``, one ``case ...`` line per case it ran (what happened to it, and how long it took),
and ``fault cases ok`` at the end.
"""

from __future__ import annotations

import argparse
import atexit
import glob
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import nbcoll
from nbcoll.comm import CommError, init
from nbcoll.comm.ll import LLStep
from nbcoll.comm.transport.ipc import IpcRecvConnection, IpcSendConnection
from nbcoll.comm.transport.mpi import MpiRecvConnection, MpiSendConnection
from nbcoll.comm.window import WindowStep

print(f"pid={os.getpid()}", flush=True)

COUNT = 24
"""Elements per block: with NBCOLL_BUFFSIZE=256 (8 slots of 32 bytes), several chunks per message."""

OPS = [
    "all_reduce:ring",
    "all_reduce:tree",
    "all_reduce:direct",
    "all_reduce:halving_doubling",
    "broadcast:ring",
    "broadcast:tree",
    "reduce:ring",
    "reduce:tree",
    "all_gather:ring",
    "all_gather:direct",
    "reduce_scatter:ring",
    "all_to_all:pairwise",
    "gather:direct",
    "scatter:direct",
    "barrier:pairwise",
    "p2p:ring",
    "group:all_reduce+all_gather",
]
KINDS = ["exit", "stop", "raise"]


class FaultInjected(RuntimeError):
    """What the victim of a ``raise`` (or a resumed ``stop``) sees."""


# -- the trigger: counted at every chunk sent, chunk received and window step --------------------------------------


class Trigger:
    fault: str | None = None
    after = 0
    events = 0
    marker = ""

    @classmethod
    def arm(cls, fault: str, after: int, marker: str) -> None:
        cls.fault, cls.after, cls.events, cls.marker = fault, after, 0, marker

    @classmethod
    def disarm(cls) -> None:
        cls.fault = None

    @classmethod
    def event(cls) -> None:
        if cls.fault is None:
            return
        cls.events += 1
        if cls.events > cls.after:
            fire()


def fire() -> None:
    fault = Trigger.fault
    Trigger.disarm()
    if fault == "exit":
        sys.stdout.flush()
        os._exit(0)
    if fault == "stop":
        with open(Trigger.marker, "w") as marker:
            marker.write("stopped")
        os.kill(os.getpid(), signal.SIGSTOP)
        raise FaultInjected("resumed after SIGSTOP")
    raise FaultInjected("injected exception")


def _counted(method: Callable) -> Callable:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        Trigger.event()
        return method(self, *args, **kwargs)

    return wrapper


for cls, name in [
    (IpcSendConnection, "post"),
    (MpiSendConnection, "post"),
    (IpcRecvConnection, "release"),
    (MpiRecvConnection, "release"),
    (WindowStep, "run"),
    (LLStep, "run"),
]:
    setattr(cls, name, _counted(getattr(cls, name)))


# -- the operations -----------------------------------------------------------------------------------------------


def run_op(comm: Any, op: str) -> None:
    """Run ``op`` ("collective:algo", "p2p:ring" or "group:...") on ``comm`` with small, multi-chunk buffers."""
    n, r = comm.size, comm.rank
    name, algo = op.split(":")

    def dev(values: Any, dtype: Any = np.float32) -> Any:
        return nbcoll.to_device(np.asarray(values, dtype))

    block = dev(np.full(COUNT, r + 1))
    full = dev(np.arange(COUNT * n))
    if name == "p2p":
        with comm.group():
            comm.send(block, (r + 1) % n)
            comm.recv(nbcoll.zeros(COUNT, np.float32), (r - 1) % n)
    elif name == "group":
        with comm.group():
            comm.all_reduce(block)
            comm.all_gather(dev(np.ones(COUNT)), nbcoll.zeros(COUNT * n, np.float32))
    elif name == "all_reduce":
        comm.all_reduce(block, algo=algo)
    elif name == "broadcast":
        comm.broadcast(block, root=n - 1, algo=algo)
    elif name == "reduce":
        comm.reduce(block, root=n - 1, algo=algo)
    elif name == "all_gather":
        comm.all_gather(block, nbcoll.zeros(COUNT * n, np.float32), algo=algo)
    elif name == "reduce_scatter":
        comm.reduce_scatter(full, nbcoll.zeros(COUNT, np.float32), algo=algo)
    elif name == "all_to_all":
        comm.all_to_all(full, nbcoll.zeros(COUNT * n, np.float32))
    elif name == "gather":
        comm.gather(block, nbcoll.zeros(COUNT * n, np.float32) if r == 0 else None, root=0)
    elif name == "scatter":
        comm.scatter(full if r == 0 else None, nbcoll.zeros(COUNT, np.float32), root=0)
    elif name == "barrier":
        comm.barrier()
    else:
        raise ValueError(f"op: unknown {op!r}")


# -- one case -----------------------------------------------------------------------------------------------------


def leftovers(pids: list[int]) -> list[str]:
    return [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]


def state_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def run_case(world: MPI.Comm, index: int, op: str, fault: str, victim: int, point: int, args: Any) -> MPI.Comm:
    """Run one case; return the MPI communicator of the ranks that are left."""
    pids = world.allgather(os.getpid())
    comm = init(world)
    timeout = comm.config.timeout
    me = world.Get_rank()
    label = f"case {index} {op} n={world.Get_size()} {fault}@{point} victim={victim}"
    marker = os.path.join(args.marker_dir, f"stopped_{pids[victim]}_{index}")
    world.Barrier()
    start = time.monotonic()
    try:
        if me == victim:
            Trigger.arm(fault, point, marker)
            if point < 0:
                fire()
        run_op(comm, op)
        outcome = "finished"
    except FaultInjected as err:
        assert me == victim, f"rank {me}: {label}: a survivor saw the injected fault: {err}"
        outcome = f"victim, {err}"
    except CommError as err:
        assert me != victim or fault == "raise", err
        first = str(err).splitlines()[0]
        assert f"rank {me}" in first, f"rank {me}: {label}: the error does not name this rank:\n{err}"
        outcome = f"{type(err).__name__}: {first[:110]}"
    if Trigger.fault is not None:  # the victim's part ended before its point: the fault comes after it
        try:
            fire()
        except FaultInjected as err:
            outcome = f"victim, {err} (after its part)"
    elapsed = time.monotonic() - start
    print(f"{label} rank {me}: {outcome} after {elapsed:.2f} s", flush=True)
    if me != victim:
        assert elapsed <= timeout + args.margin, f"rank {me}: {label}: {elapsed:.2f} s > {timeout} + {args.margin} s"
    survivors = [r for r in range(world.Get_size()) if r != victim]
    if fault == "stop" and me == survivors[0]:
        # Resume the victim once every survivor is done with the case (they all wait here for it).
        deadline = time.monotonic() + timeout + args.margin + 10
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        while os.path.exists(marker) and state_of(pids[victim]) not in "TtXZ" and time.monotonic() < deadline:
            time.sleep(0.01)
    if fault == "stop" and me != victim:
        world_survivors = world.Create_group(world.Get_group().Excl([victim]), tag=11)
        world_survivors.Barrier()  # every survivor has its outcome: the victim may run again
        world_survivors.Free()
        if me == survivors[0] and os.path.exists(marker):
            os.kill(pids[victim], signal.SIGCONT)
    comm.destroy()
    if fault == "exit":
        if me == victim:
            raise AssertionError(f"rank {me}: {label}: the victim outlived its exit")
        # A survivor that left now could take with it chunks the victim has still to receive: wait for its end.
        deadline = time.monotonic() + timeout + args.margin + 10
        while state_of(pids[victim]) not in "XZ" and time.monotonic() < deadline:
            time.sleep(0.01)
        remaining = world.Create_group(world.Get_group().Excl([victim]), tag=12)
        assert not leftovers([pids[victim]]), f"{label}: the dead victim's names are left: {leftovers(pids)}"
        world = remaining
    else:
        world.Barrier()
    assert not leftovers([os.getpid()]), f"rank {me}: {label}: left {leftovers([os.getpid()])}"
    return world


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=10)
    parser.add_argument("--ops", default="all", help="comma-separated ops (see OPS), or all")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--points", default="-1,0,2")
    parser.add_argument("--exits", type=int, default=None, help="how many exit cases at most (default: size - 2)")
    parser.add_argument("--margin", type=float, default=3.0)
    parser.add_argument("--marker-dir", default=os.environ.get("TMPDIR", "/tmp"))
    parser.add_argument("--plan", default="", help="cases to run instead: op/fault/point/victim;...")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    if args.plan:
        for index, case in enumerate(args.plan.split(";")):
            op, fault, point, victim = case.split("/")
            if world.Get_size() < 2:
                break
            world = run_case(world, index, op, fault, int(victim) % world.Get_size(), int(point), args)
        finish()
        return
    ops = OPS if args.ops == "all" else args.ops.split(",")
    kinds = args.kinds.split(",")
    points = [int(p) for p in args.points.split(",")]
    others = [k for k in kinds if k != "exit"]
    exits = 0 if "exit" not in kinds else min(args.cases, world.Get_size() - 2)
    if args.exits is not None:
        exits = min(exits, args.exits)
    # Each exit ends a rank for good: spread them, so that every rank count from N down to N - exits gets cases.
    exit_at = set(range(exits)) if not others else {round((k + 1) * args.cases / (exits + 1)) - 1 for k in range(exits)}
    rng = random.Random(args.seed)  # every rank draws the same cases
    for index in range(args.cases):
        if world.Get_size() < 2 or (not others and index not in exit_at):
            break
        fault = "exit" if index in exit_at else rng.choice(others)
        op, victim, point = rng.choice(ops), rng.randrange(world.Get_size()), rng.choice(points)
        world = run_case(world, index, op, fault, victim, point, args)
    finish()


def finish() -> None:
    print("fault cases ok", flush=True)
    sys.stdout.flush()
    atexit.register(os._exit, 0)  # MPI_Finalize would wait for the ranks that are gone


if __name__ == "__main__":
    main()
