"""Stress: hundreds of mixed operations on several communicators, in a random order, every result checked exactly.

Every rank draws the same sequence of operations from one seed: collectives of every kind (synchronous or
async, with the tuner's algorithm or a forced one), groups of collectives, and sends and receives (a ring in a
group, or a pair outside any group), each on one of four communicators: the world, a duplicate of it, the half
of the ranks of this rank's parity (``split``), and the first ranks but one (``split`` with ``NOCOLOR``). Async
handles are waited for at random moments, and the last ones only after their communicators are destroyed.
Every input is a function of the operation, the rank and the element, so each rank computes every expected
result by itself; integer and float results must match exactly.

Run::

    python benchmarks/stress.py                          # 4 ranks on two pretend nodes, 3 seeds of 2000 operations
    mpiexec -n 4 python benchmarks/stress.py --ops 150 --seed 7     # one rank count, one seed (the test's run)

It prints one line per seed on rank 0: the operations, the async share and the time. A wrong value raises
``AssertionError`` naming the operation; a hang is bounded by ``NBCOLL_TIMEOUT``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
COUNTS = (1, 7, 300, 1500, 4000)
DTYPES = (np.int64, np.int32, np.float64)
REDUCTIONS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}
ALGOS = {
    "all_reduce": (None, "ring", "tree", "direct", "halving_doubling"),
    "broadcast": (None, "ring", "tree"),
    "reduce": (None, "ring", "tree"),
    "all_gather": (None, "ring", "direct"),
}
KINDS = (
    ["all_reduce"] * 4
    + ["broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "barrier"]
    + ["group"] * 2
    + ["ring"] * 2
    + ["pair"] * 2
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=2000, help="operations per seed (default 2000)")
    p.add_argument("--seed", type=int, default=None, help="one seed (default: --seeds of them)")
    p.add_argument("--seeds", type=int, default=3, help="how many seeds when --seed is not given (default 3)")
    p.add_argument("--ranks", default="4", help="rank counts to launch when not under mpiexec (default 4)")
    return p.parse_args(argv)


def inputs(op: int, rank: int, count: int, dtype) -> np.ndarray:
    """The block rank ``rank`` contributes to operation ``op``: small integers, exact in every dtype."""
    return ((np.arange(count) + 13 * rank + 7 * op) % 5 + 1).astype(dtype)


class Member:
    """One communicator and this rank's place in it (``comm`` is None where this rank is not a member)."""

    def __init__(self, name: str, comm) -> None:
        self.name, self.comm = name, comm
        self.size = comm.size if comm is not None else 0
        self.rank = comm.rank if comm is not None else -1


def collective(
    m: Member, kind: str, op: int, rng: np.random.Generator, async_op: bool, pending: list, in_group: bool = False
) -> None:
    """Issue one collective on ``m`` (every rank draws the same numbers) and register the check of its result."""
    import nbcoll

    n, c = m.size, m.rank
    count, dtype = int(rng.choice(COUNTS)), DTYPES[rng.integers(len(DTYPES))]
    reduction = str(rng.choice(list(REDUCTIONS)))
    root = int(rng.integers(1 << 30)) % max(n, 1)  # the same draw on ranks outside the communicator
    algo = ALGOS[kind][rng.integers(len(ALGOS[kind]))] if kind in ALGOS else None
    if m.comm is None:
        return
    everyone = [inputs(op, k, count * (n if kind in ("reduce_scatter", "all_to_all", "scatter") else 1), dtype)
                for k in range(n)]  # fmt: skip
    mine = nbcoll.to_device(everyone[c])
    fill = np.full(count * n, -1, dtype)
    reduced = REDUCTIONS[reduction](np.stack(everyone), axis=0)
    what = f"{kind} #{op} on {m.name} ({count} x {np.dtype(dtype).name}, {reduction}, root {root}, {algo})"
    if kind == "all_reduce":
        out, expect = mine, reduced
        result = m.comm.all_reduce(mine, op=reduction, algo=algo, async_op=async_op)
    elif kind == "broadcast":
        out, expect = mine, everyone[root]
        result = m.comm.broadcast(mine, root=root, algo=algo, async_op=async_op)
    elif kind == "reduce":
        out = nbcoll.to_device(fill[:count])
        expect = reduced if c == root else fill[:count]
        result = m.comm.reduce(mine, out, op=reduction, root=root, algo=algo, async_op=async_op)
    elif kind == "all_gather":
        out, expect = nbcoll.to_device(fill), np.concatenate(everyone)
        result = m.comm.all_gather(mine, out, algo=algo, async_op=async_op)
    elif kind == "reduce_scatter":
        out, expect = nbcoll.to_device(fill[:count]), reduced[c * count : (c + 1) * count]
        result = m.comm.reduce_scatter(mine, out, op=reduction, async_op=async_op)
    elif kind == "all_to_all":
        out = nbcoll.to_device(fill)
        expect = np.concatenate([everyone[p][c * count : (c + 1) * count] for p in range(n)])
        result = m.comm.all_to_all(mine, out, async_op=async_op)
    elif kind == "gather":
        out = nbcoll.to_device(fill)
        expect = np.concatenate(everyone) if c == root else fill
        result = m.comm.gather(mine, out if c == root else None, root=root, async_op=async_op)
    elif kind == "scatter":
        out, expect = nbcoll.to_device(fill[:count]), everyone[root][c * count : (c + 1) * count]
        result = m.comm.scatter(mine if c == root else None, out, root=root, async_op=async_op)
    else:
        out, expect = None, None
        result = m.comm.barrier(async_op=async_op)
    check = _checker(what, out, expect)
    if async_op:
        pending.append((result, check))
    elif in_group:  # a synchronous call in a group is done when the group ends
        pending.append((None, check))
    else:
        check()


def _checker(what: str, out, expect) -> Callable[[], None]:
    import nbcoll

    def check() -> None:
        if out is not None:
            got = nbcoll.to_host(out)
            assert np.array_equal(got, expect), f"{what}: got {got[:8]} ..., expected {expect[:8]} ..."

    return check


def point_to_point(m: Member, kind: str, op: int, rng: np.random.Generator, pending: list) -> None:
    """A ring shift in a group, or one message from the first to the last rank outside any group."""
    import nbcoll

    count, dtype = int(rng.choice(COUNTS)), DTYPES[rng.integers(len(DTYPES))]
    if m.comm is None or m.size < 2:
        return
    n, c = m.size, m.rank
    what = f"{kind} #{op} on {m.name} ({count} x {np.dtype(dtype).name})"
    if kind == "ring":
        out = nbcoll.to_device(np.full(count, -1, dtype))
        with m.comm.group():
            m.comm.send(nbcoll.to_device(inputs(op, c, count, dtype)), (c + 1) % n)
            m.comm.recv(out, (c - 1) % n)
        _checker(what, out, inputs(op, (c - 1) % n, count, dtype))()
    elif c == 0:
        m.comm.send(nbcoll.to_device(inputs(op, 0, count, dtype)), n - 1)
    elif c == n - 1:
        out = nbcoll.to_device(np.full(count, -1, dtype))
        m.comm.recv(out, 0)
        _checker(what, out, inputs(op, 0, count, dtype))()


def run_seed(world, seed: int, ops: int) -> tuple[int, float]:
    """Run ``ops`` operations drawn from ``seed``; return how many were async, and the seconds taken."""
    import nbcoll

    n = world.size
    members = [
        Member("world", world),
        Member("dup", world.dup()),
        Member("parity", world.split(color=world.rank % 2, key=world.rank)),
        Member("first", world.split(color=0 if world.rank < max(n - 1, 1) else nbcoll.NOCOLOR)),
    ]
    rng = np.random.default_rng(seed)  # the same draws on every rank: which operation, where, how
    local = np.random.default_rng([seed, world.rank])  # this rank's own: when to wait for which handle
    pending: list = []
    asyncs = 0
    start = time.perf_counter()
    for op in range(ops):
        m = members[rng.integers(len(members))]
        kind = KINDS[rng.integers(len(KINDS))]
        if kind in ("ring", "pair"):
            point_to_point(m, kind, op, rng, pending)
        elif kind == "group":
            inner = [("all_reduce", "reduce", "broadcast", "all_gather")[k] for k in rng.integers(4, size=3)]
            async_flags = rng.random(3) < 0.5
            in_group: list = []
            with m.comm.group() if m.comm is not None else contextlib.nullcontext():
                for k, (name, flag) in enumerate(zip(inner, async_flags, strict=True)):
                    collective(m, name, op * 10 + k, rng, bool(flag), in_group, in_group=True)
            for work, check in in_group:
                if work is None:
                    check()
                else:
                    pending.append((work, check))
        else:
            async_op = bool(rng.random() < 0.5)
            asyncs += async_op
            collective(m, kind, op, rng, async_op, pending)
        if pending and local.random() < 0.2:  # wait for a few, in a random order (waiting is local)
            for index in sorted(local.choice(len(pending), size=min(3, len(pending)), replace=False), reverse=True):
                work, check = pending.pop(int(index))
                work.wait(timeout=600)
                check()
    for m in members[1:]:  # destroy lets what is still in flight finish first
        if m.comm is not None:
            m.comm.destroy()
    for work, check in pending:
        work.wait(timeout=600)
        check()
    world.barrier()
    return asyncs, time.perf_counter() - start


def run_rank(args: argparse.Namespace) -> int:
    import nbcoll

    world = nbcoll.init()
    print(f"pid={os.getpid()}", flush=True)
    seeds = [args.seed] if args.seed is not None else list(range(args.seeds))
    for seed in seeds:
        asyncs, seconds = run_seed(world, seed, args.ops)
        if world.rank == 0:
            print(f"seed {seed}: {args.ops} operations ({asyncs} async collectives) in {seconds:.1f} s", flush=True)
    print(f"rank {world.rank}: stress ok: {args.ops} operations x {len(seeds)} seeds", flush=True)
    world.destroy()
    return 0


def main(argv: list[str] | None = None) -> int:
    from nbcoll.launch import launch, under_mpi

    args = parse_args(argv)
    if under_mpi():
        return run_rank(args)
    status = 0
    env = {"NBCOLL_BACKEND": os.environ.get("NBCOLL_BACKEND", "numpy"), "NBCOLL_BUFFSIZE": "65536"}
    env["NBCOLL_RANKS_PER_NODE"] = os.environ.get("NBCOLL_RANKS_PER_NODE", "2")  # ipc and mpi connections
    for nranks in (int(x) for x in args.ranks.split(",")):
        result = launch(nranks, __file__, args=sys.argv[1:] if argv is None else argv, env=env, timeout=3600)
        print(result.outputs[0] if result.ok else result.report(), end="", flush=True)
        status = status or (0 if result.ok else 1)
    return status


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
