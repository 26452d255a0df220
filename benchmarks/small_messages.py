"""Where the fixed cost of one small collective goes: every stage of the call path timed, per call, as a table.

Each rank runs ``--iters`` all-reduces (or another collective) per size with a stopwatch around every stage of
the call path, from the entry checks to the kernels and back. A stage's time is *exclusive*: a stage called inside
another is taken out of its parent, so the rows add up to the whole call. The table shows rank 0's median per
call, in microseconds, next to the same call without the stopwatch and MPI's own collective, timed interleaved
in the same run (``uninstrumented`` is the figure to compare with MPI; the stopwatch itself adds about 1 us per
stage entered).

Run::

    python benchmarks/small_messages.py                      # launches itself on 2 and then 4 ranks, numpy backend
    mpiexec -n 4 python benchmarks/small_messages.py --collective all_gather --algo ring
    python benchmarks/small_messages.py --quick              # two sizes, few calls: a smoke test
    python benchmarks/small_messages.py --no-replay          # every call planned in full (first calls)

It writes ``small_messages_<collective>_<n>ranks.txt`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from ranks import run_on_ranks

HERE = Path(__file__).resolve().parent
SIZES = [8, 64, 512, 4 << 10, 32 << 10, 64 << 10]
QUICK_SIZES = [8, 4 << 10]

# stage -> (module, class, attribute): what the stopwatch wraps (module "comm": an object of the communicator;
# class None: a function of the module).
# The collective's own method is the outermost stage, so what it does itself (argument checks) is its own time.
STAGES = {
    "the method: checks, or a replay's match": [
        ("nbcoll.comm.replay", "Replays", "call"),  # the replay hook around the method
        ("nbcoll.comm.collectives", "Collectives", "{collective}"),
    ],
    "numbering, refusals, usability": [
        ("nbcoll.comm.engine", "Engine", "settle"),
        ("nbcoll.comm.engine", "Engine", "mark_run"),
        ("nbcoll.comm.refusal", "Refusals", "number"),
        ("nbcoll.comm.refusal", "Refusals", "number_run"),  # a replay's
        ("nbcoll.comm.lifecycle", "Lifecycle", "_check_usable"),
    ],
    "plan: algorithm choice (tuner)": [("nbcoll.comm.engine", "Engine", "choose")],
    "plan: context, record, operation": [("nbcoll.comm.engine", "Engine", "plan")],
    "queue hand-off (progress.submit)": [("nbcoll.comm.progress", "Progress", "submit")],
    "watchdog loop (drive)": [("comm", "engine.progress", "_drive")],  # bound when the queue was made
    "waiting for peers (yield, sleep)": [
        ("nbcoll.comm.watchdog", "Watchdog", "_wait_a_little"),
        ("nbcoll.comm.replay", None, "ready_soon"),  # a replay's short wait (its polls count as polls)
    ],
    "abort and dead-peer checks (entry, waits)": [
        ("nbcoll.comm.watchdog", "Watchdog", "check_aborted"),
        ("nbcoll.comm.watchdog", "Watchdog", "check_peers"),
    ],
    "step bookkeeping (CollectiveOp.progress)": [("nbcoll.comm.collective_op", "CollectiveOp", "progress")],
    "building steps (algorithm generator)": [
        ("nbcoll.comm.algorithms.common", "Context", "prims"),
        ("nbcoll.comm.primitives", "Step", "__init__"),
        ("nbcoll.comm.window_step", "WindowStep", "__init__"),
        ("nbcoll.comm.ll", "LLStep", "__init__"),
    ],
    "ready polls": [
        ("nbcoll.comm.primitives", "Step", "ready"),
        ("nbcoll.comm.window_step", "_FlagWait", "ready"),  # window steps and releases
        ("nbcoll.comm.ll", "LLStep", "ready"),
    ],
    "step run (copies, folds, flags)": [
        ("nbcoll.comm.primitives", "Step", "run"),
        ("nbcoll.comm.window_step", "WindowStep", "run"),
        ("nbcoll.comm.ll", "LLStep", "run"),
    ],
    "counters": [("nbcoll.comm.primitives", "Prims", "charge"), ("nbcoll.comm.primitives", "Prims", "charge_copy")],
    "trace": [("nbcoll.comm.trace", "Tracer", "step")],
    "flight recorder, handle": [
        ("nbcoll.comm.debug", "FlightRecorder", "record"),
        ("nbcoll.comm.debug", "OperationRecord", "finish"),
        ("nbcoll.comm.work", "Work", "__init__"),
        ("nbcoll.comm.work", "Work", "_finish"),
    ],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collective", default="all_reduce", help="all_reduce (default), all_gather, ...")
    p.add_argument("--algo", default=None, help="force an algorithm (default: the tuner's choice)")
    p.add_argument("--ranks", default="2,4", help="rank counts to launch when not under mpiexec (default 2,4)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per size (default 300)")
    p.add_argument("--quick", action="store_true", help="two sizes, 30 calls each (a smoke test)")
    p.add_argument(
        "--no-replay",
        action="store_true",
        help="plan every call in full, as the first call on new buffers is (by default a repeated direct call is a "
        "replay: nbcoll.comm.replay)",
    )
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .txt table")
    return p.parse_args(argv)


class Stopwatch:
    """Exclusive time per stage: entering a stage pauses the one it was called from.

    Example::

        watch = Stopwatch()
        with watch.installed(STAGES, comm, "all_reduce"):
            comm.all_reduce(x)
        watch.take()          # {stage: ns} of that call
    """

    def __init__(self) -> None:
        self.totals: dict[str, int] = defaultdict(int)
        self.stack: list[list] = []  # [stage, started_ns, children_ns]

    def wrap(self, stage: str, fn: Callable) -> Callable:
        totals, stack, clock = self.totals, self.stack, time.perf_counter_ns

        def timed(*args, **kwargs):
            frame = [stage, clock(), 0]
            stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()
                spent = clock() - frame[1]
                totals[stage] += spent - frame[2]
                if stack:
                    stack[-1][2] += spent

        return timed

    @contextlib.contextmanager
    def installed(self, stages: dict, comm, collective: str) -> Iterator[None]:
        import importlib
        from operator import attrgetter

        undo = []
        for stage, targets in stages.items():
            for module_name, owner_name, attribute in targets:
                if module_name == "comm":
                    owner = attrgetter(owner_name)(comm)
                elif owner_name is None:
                    owner = importlib.import_module(module_name)
                else:
                    owner = getattr(importlib.import_module(module_name), owner_name)
                attribute = attribute.format(collective=collective)
                if isinstance(owner, type):  # the class along the MRO that defines it (a mixin's method)
                    owner = next(c for c in owner.__mro__ if attribute in c.__dict__)
                original = owner.__dict__[attribute]
                if isinstance(original, staticmethod):
                    setattr(owner, attribute, staticmethod(self.wrap(stage, original.__func__)))
                else:
                    setattr(owner, attribute, self.wrap(stage, original))
                undo.append((owner, attribute, original))
        try:
            yield
        finally:
            for owner, attribute, original in reversed(undo):
                setattr(owner, attribute, original)

    def take(self) -> dict[str, int]:
        totals, self.totals = dict(self.totals), defaultdict(int)
        return totals


def call_of(comm, world, collective: str, algo: str | None, nbytes: int) -> tuple[Callable, Callable]:
    """nbcoll's call and MPI's, on ``nbytes`` per rank of int32 (at least one element)."""
    from mpi4py import MPI

    count, n = max(1, nbytes // 4), comm.size
    x = np.arange(count, dtype=np.int32) + comm.rank
    if collective == "all_reduce":
        y = np.zeros_like(x)
        return lambda: comm.all_reduce(x, y, algo=algo), lambda: world.Allreduce(x, y, op=MPI.SUM)
    if collective == "all_gather":
        y = np.zeros(count * n, np.int32)
        return lambda: comm.all_gather(x, y, algo=algo), lambda: world.Allgather(x, y)
    if collective == "broadcast":
        y = np.zeros_like(x)
        return lambda: comm.broadcast(x, y, algo=algo), lambda: world.Bcast(y, root=0)
    if collective == "reduce_scatter":
        big, y = np.tile(x, n), np.zeros_like(x)
        return lambda: comm.reduce_scatter(big, y, algo=algo), lambda: world.Reduce_scatter_block(big, y)
    if collective == "all_to_all":
        big, y = np.tile(x, n), np.zeros(count * n, np.int32)
        return lambda: comm.all_to_all(big, y, algo=algo), lambda: world.Alltoall(big, y)
    raise ValueError(f"--collective: {collective!r} is not one this benchmark runs")


def measure(comm, world, collective: str, algo: str | None, nbytes: int, iters: int) -> dict[str, float]:
    """Median microseconds per call of every stage, of the whole call, of the uninstrumented call and of MPI's."""
    ours, mpi = call_of(comm, world, collective, algo, nbytes)
    for _ in range(20):
        ours()
    watch = Stopwatch()
    per_stage: dict[str, list[int]] = {stage: [] for stage in STAGES}
    whole, plain, theirs = [], [], []
    clock = time.perf_counter_ns
    for _ in range(iters):  # interleaved: instrumented, plain, MPI, so all three see the same machine
        world.Barrier()
        with watch.installed(STAGES, comm, collective):
            t0 = clock()
            ours()
            whole.append(clock() - t0)
        spent = watch.take()
        for stage in STAGES:  # a stage that did not run in this call counts zero
            per_stage[stage].append(spent.get(stage, 0))
        world.Barrier()
        t0 = clock()
        ours()
        plain.append(clock() - t0)
        world.Barrier()
        t0 = clock()
        mpi()
        theirs.append(clock() - t0)
    row = {stage: statistics.median(v) / 1e3 for stage, v in per_stage.items()}
    row["whole call (instrumented)"] = statistics.median(whole) / 1e3
    row["uninstrumented"] = statistics.median(plain) / 1e3
    row["MPI"] = statistics.median(theirs) / 1e3
    return row


def format_table(rows: dict[int, dict[str, float]], title: str) -> str:
    sizes = list(rows)
    names = list(next(iter(rows.values())))
    width = max(len(n) for n in names) + 2
    head = "stage (median us per call)".ljust(width) + "".join(f"{_size(s):>9}" for s in sizes)
    lines = [title, head, "-" * len(head)]
    for name in names:
        if name == "whole call (instrumented)":
            lines.append("-" * len(head))
        lines.append(name.ljust(width) + "".join(f"{rows[s][name]:9.1f}" for s in sizes))
    return "\n".join(lines)


def _size(nbytes: int) -> str:
    return f"{nbytes >> 10}K" if nbytes >= 1024 else f"{nbytes}B"


def run_rank(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from nbcoll.comm import init

    world = MPI.COMM_WORLD
    comm = init(world)
    if comm.engine.replays is not None:  # None where the fast paths are off (NBCOLL_FASTPATH=0, NBCOLL_CHECK=1)
        comm.engine.replays.enabled = not args.no_replay
    sizes = QUICK_SIZES if args.quick else SIZES
    iters = args.iters or (30 if args.quick else 300)
    rows = {size: measure(comm, world, args.collective, args.algo, size, iters) for size in sizes}
    if comm.rank == 0:
        algo = args.algo or ", ".join(sorted({comm.engine.choose(args.collective, s) for s in sizes}))
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        title = (
            f"# {args.collective} ({algo}) on {comm.size} ranks, numpy backend, int32, {iters} calls per size, "
            f"medians of rank 0 (each row is its own median: a column need not add up exactly)\n"
            f"# measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load average "
            f"{load:.1f}, {os.cpu_count()} cores: python benchmarks/small_messages.py"
            + (f" --collective {args.collective}" if args.collective != "all_reduce" else "")
            + (f" --algo {args.algo}" if args.algo else "")
            + (" --no-replay" if args.no_replay else "")
            + f"  (mpiexec -n {comm.size})"
        )
        table = format_table(rows, title)
        print(table, flush=True)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        tags = ("_no_replay" if args.no_replay else "") + ("_quick" if args.quick else "")
        path = out / f"small_messages_{args.collective}_{comm.size}ranks{tags}.txt"
        path.write_text(table + "\n")
        print(f"# wrote {path}", flush=True)
    comm.destroy()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_on_ranks(__file__, run_rank, parse_args(argv), argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
