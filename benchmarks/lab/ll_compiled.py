"""The LL step compiled (``NBCOLL_LL_COMPILED=1``) against its references, every LL collective, in one run.

On the ``numpy`` backend an LL step writes its lines and polls its peers' through the references of
:mod:`nbcoll.kernels.ll`, a call a segment and a source, as a GPU runs its launches; with ``NBCOLL_LL_COMPILED=1``
through the two compiled loops of :mod:`nbcoll.kernels.ll_host`. Both run here, on two communicators of the same
ranks, with MPI's collective beside them: samples of ``--inner`` replayed calls after a barrier, the slowest rank's
time per call, contenders interleaved so that each follows each other about equally often, medians. Every
result is checked against MPI's.

Run::

    python benchmarks/lab/ll_compiled.py                  # launches itself on 2 and then 4 ranks, numpy backend
    python benchmarks/lab/ll_compiled.py --quick          # two sizes, few repeats: a smoke test

It writes ``ll_compiled_<n>ranks.txt`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
from ranks import interleaved_samples, run_on_ranks
from vs_mpi import buffers, mpi_call, nbcoll_call

HERE = Path(__file__).resolve().parent
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
SIZES = [8, 512, 4 << 10, 32 << 10]
QUICK_SIZES = [8, 4 << 10]
CONTENDERS = ["references", "compiled", "MPI"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4", help="rank counts to launch when not under mpiexec (default 2,4)")
    p.add_argument("--repeats", type=int, default=15, help="samples per contender and size (default 15)")
    p.add_argument("--inner", type=int, default=100, help="calls per sample (default 100)")
    p.add_argument("--quick", action="store_true", help="two sizes, 3 repeats of 10 calls (a smoke test)")
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .txt table")
    return p.parse_args(argv)


def calls_of(comms: dict, world, collective: str, nbytes: int) -> tuple[dict, dict]:
    """Each contender's call and the output it writes, each on buffers of its own (``vs_mpi.py``'s exact inputs);
    ``comms`` holds nbcoll's two communicators, by contender."""
    rank, n = world.Get_rank(), world.Get_size()
    calls, outputs = {}, {}
    for name in CONTENDERS:
        send, recv = buffers(collective, max(1, nbytes // 4), rank, n)
        if collective == "broadcast":  # in place, as MPI's Bcast: the root's buffer holds the data
            recv[...] = send if rank == 0 else 0
        comm = comms.get(name)
        if comm is None:
            calls[name] = mpi_call(world, collective, send, recv)
        else:
            calls[name] = nbcoll_call(comm, collective, "direct", send, recv)
        outputs[name] = recv
    return calls, outputs


def measure(comms: dict, world, collective: str, nbytes: int, repeats: int, inner: int) -> dict:
    """Median microseconds per call of each contender at one size, and whether their results agree."""
    from mpi4py import MPI

    calls, outputs = calls_of(comms, world, collective, nbytes)
    for call in calls.values():  # planned here: every later call of nbcoll's replays these steps
        call()
    times, _ = interleaved_samples(world, {name: calls[name] for name in CONTENDERS}, repeats, inner)
    same = all(np.array_equal(out, outputs["MPI"]) for out in outputs.values())
    row = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    row["agree"] = bool(world.allreduce(same, op=MPI.LAND))
    return row


def format_table(rows: list[dict], nranks: int) -> str:
    names = f"{'references':>12}{'compiled':>10}{'ratio':>7}{'MPI':>8}{'x MPI':>7}"
    head = f"{'collective':>15}{'size (B)':>10}{names}  exact"
    lines = [
        f"# direct LL collectives on {nranks} ranks, numpy backend, float32: median us per call; ratio = compiled / "
        "references; x MPI = compiled / MPI",
        head,
    ]
    for r in rows:
        lines.append(
            f"{r['collective']:>15}{r['nbytes']:>10}{r['references']:12.1f}{r['compiled']:10.1f}"
            f"{r['compiled'] / r['references']:7.2f}{r['MPI']:8.1f}{r['compiled'] / r['MPI']:7.1f}  "
            f"{'yes' if r['agree'] else 'NO'}"
        )
    ratios = [r["compiled"] / r["references"] for r in rows]
    spread = f"median {statistics.median(ratios):.2f}, {min(ratios):.2f} to {max(ratios):.2f}"
    lines.append(f"# compiled / references: {spread}")
    return "\n".join(lines)


def run_rank(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from nbcoll.comm import CommConfig, init

    world = MPI.COMM_WORLD
    base = CommConfig.from_env()
    comms = {name: init(world, replace(base, ll_compiled=name == "compiled")) for name in ("references", "compiled")}
    comm = comms["compiled"]
    sizes = QUICK_SIZES if args.quick else SIZES
    repeats, inner = (3, 10) if args.quick else (args.repeats, args.inner)
    rows = [{"collective": c, "nbytes": s, **measure(comms, world, c, s, repeats, inner)} for c in COLLECTIVES
            for s in sizes]  # fmt: skip
    if comm.rank == 0:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        command = " ".join(["python benchmarks/lab/ll_compiled.py", *sys.argv[1:]])
        machine = f"load average {load:.1f}, {os.cpu_count()} cores"
        text = format_table(rows, comm.size) + f"\n# measured {stamp}, {machine}: {command}  (mpiexec -n {comm.size})\n"
        print(text, end="", flush=True)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"ll_compiled_{comm.size}ranks{'_quick' if args.quick else ''}.txt").write_text(text)
    for each in comms.values():
        each.destroy()
    return 0 if all(r["agree"] for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    return run_on_ranks(__file__, run_rank, parse_args(argv), argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
