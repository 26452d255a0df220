"""Every fault at every point of every collective and algorithm, on 2 to 4 ranks, over ipc, mpi and pretend nodes.

The test suite runs a seeded sample of these cases (tests/test_comm_reliability.py); this runs them all and prints
one row per case: what each survivor saw (``ok`` finished, ``T`` CommTimeoutError, ``P`` CommPeerLostError,
``A`` CommAbortedError), the slowest survivor's time, and whether the case held (every survivor finished or raised
within ``NBCOLL_TIMEOUT`` plus the margin, no ``/dev/shm`` name left, every process ended)::

    python benchmarks/fault_sweep.py                      # everything: about an hour on 2 cores
    python benchmarks/fault_sweep.py --quick              # one point, one victim, 3 ranks: a few minutes
    python benchmarks/fault_sweep.py --ops all_reduce:direct,p2p:ring --kinds exit --ranks 4

``stop`` and ``raise`` cases of one configuration run in one launch, one case after another; each ``exit`` ends
a rank for good, so each runs in a launch of its own.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from nbcoll.launch import find_mpiexec, launch  # noqa: E402

SCRIPT = HERE.parent / "tests" / "mpi_scripts" / "fault_inject.py"
TRANSPORTS = {"ipc": {}, "mpi": {"NBCOLL_TRANSPORT": "mpi"}, "fake-nodes": {"NBCOLL_RANKS_PER_NODE": "2"}}
CASE_LINE = re.compile(r"^case (\d+) (\S+) n=(\d+) (\w+)@(-?\d+) victim=(\d+) rank (\d+): (.*) after ([\d.]+) s$", re.M)
SHORT = {"finished": "ok", "CommTimeoutError": "T", "CommPeerLostError": "P", "CommAbortedError": "A"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,3,4", help="rank counts (default 2,3,4)")
    parser.add_argument("--transports", default=",".join(TRANSPORTS))
    parser.add_argument("--ops", default="all", help="op:algo list from fault_inject.OPS, or all")
    parser.add_argument("--kinds", default="exit,stop,raise")
    parser.add_argument("--points", default="-1,0,2", help="-1: before the call; k: after k chunks or steps")
    parser.add_argument("--timeout", default="1.5", help="NBCOLL_TIMEOUT of the ranks (seconds)")
    parser.add_argument("--margin", type=float, default=3.0, help="seconds a survivor may take past the timeout")
    parser.add_argument("--quick", action="store_true", help="3 ranks, point 0, the last rank as victim")
    return parser.parse_args(argv)


def all_ops() -> list[str]:
    text = SCRIPT.read_text()
    block = text[text.index("OPS = [") : text.index("]", text.index("OPS = ["))]
    return re.findall(r'"([a-z0-9_]+:[a-z_+]+)"', block)


def mpiexec_keeping_survivors(directory: str) -> str:
    """MPICH's mpiexec ends every rank when one exits; the sweep must see what the others do."""
    mpiexec = find_mpiexec()
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    if "HYDRA" not in version:
        return mpiexec
    wrapper = Path(directory) / "mpiexec"
    wrapper.write_text(f'#!/bin/sh\nexec "{mpiexec}" -disable-auto-cleanup "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def run_plan(nranks: int, transport: str, plan: list[str], args: argparse.Namespace, scratch: str) -> list[dict]:
    """Launch ``plan`` on ``nranks``; one row per case, with the launch's verdict on processes and names."""
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": args.timeout, "NBCOLL_BUFFSIZE": "256"}
    env.update(TRANSPORTS[transport])
    cli = ["--plan", ";".join(plan), "--margin", str(args.margin), "--marker-dir", scratch]
    budget = 60 + len(plan) * (float(args.timeout) + args.margin + 5)
    result = launch(nranks, SCRIPT, args=cli, env=env, timeout=budget)
    left = [name for pid in result.pids if pid for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]
    running = [pid for pid in result.pids if pid and os.path.exists(f"/proc/{pid}")]
    finished = sum("fault cases ok" in out for out in result.outputs)
    failure = ""
    if result.timed_out:
        failure = "launch timed out"
    elif any(status not in (0, None) for status in result.statuses):
        failure = "a rank failed: " + next(
            (line for out in result.outputs for line in out.splitlines() if "Error" in line), "?"
        )
    elif finished != nranks - sum("/exit/" in case for case in plan):
        failure = "a rank other than an exit's victim did not finish"
    rows = []
    for index, case in enumerate(plan):
        seen = [m for m in CASE_LINE.finditer("\n".join(result.outputs)) if int(m.group(1)) == index]
        survivors = [m for m in seen if not m.group(8).startswith("victim")]
        outcomes = sorted(SHORT.get(m.group(8).split(":")[0], "?") for m in survivors)
        slowest = max((float(m.group(9)) for m in survivors), default=0.0)
        ok = bool(seen) and not failure and not left and not running and "?" not in outcomes
        ok = ok and slowest <= float(args.timeout) + args.margin
        rows.append(
            {
                "transport": transport,
                "n": nranks,
                "case": case.replace("/", " "),
                "survivors": " ".join(outcomes) or "-",
                "slowest": slowest,
                "verdict": "ok" if ok else f"FAIL {failure or ('names left' if left else 'see output')}",
            }
        )
    if any(row["verdict"] != "ok" for row in rows) and not result.ok:
        print(result.report()[-3000:], file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ops = all_ops() if args.ops == "all" else args.ops.split(",")
    kinds, points = args.kinds.split(","), args.points.split(",")
    ranks = [3] if args.quick else [int(n) for n in args.ranks.split(",")]
    if args.quick:
        points = ["0"]
    rows: list[dict] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nbcoll_faults_") as scratch:
        os.environ["NBCOLL_MPIEXEC"] = mpiexec_keeping_survivors(scratch)
        for transport in args.transports.split(","):
            for n in ranks:
                if transport == "fake-nodes" and n < 3:
                    continue  # one pretend node: the same as ipc
                victims = [n - 1] if args.quick else range(n)
                cases = [f"{op}/{k}/{p}/{v}" for op in ops for k in kinds for p in points for v in victims]
                survivable = [c for c in cases if "/exit/" not in c]
                if survivable:
                    rows += run_plan(n, transport, survivable, args, scratch)
                for case in (c for c in cases if "/exit/" in c):
                    rows += run_plan(n, transport, [case], args, scratch)
                print(f"# {transport}, {n} ranks: {len(rows)} cases so far, {time.monotonic() - started:.0f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
    header = (
        f"{'transport':<11} {'n':>2}  {'case (op fault point victim)':<44} {'survivors':<12} {'slowest':>8}  verdict"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['transport']:<11} {row['n']:>2}  {row['case']:<44} {row['survivors']:<12} "
            f"{row['slowest']:>7.2f}s  {row['verdict']}"
        )
    failed = [row for row in rows if row["verdict"] != "ok"]
    print(f"\ncases held: {len(rows) - len(failed)} of {len(rows)}")
    print(f"NBCOLL_TIMEOUT={args.timeout} s, margin {args.margin} s, {time.monotonic() - started:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
