"""nbcoll's collectives against the MPI library's and torch.distributed's gloo, on the same host buffers, in one run.

For every collective and size, each rank times MPI (through mpi4py), gloo (torch.distributed on CPU, when torch
is installed: ``pip install -e ".[peers]"``) and every nbcoll algorithm that applies, interleaved repeat by
repeat so that all see the same machine noise, in orders that put each contender after each other, and in each
place of a round, about equally often (a contender's time depends on the ones that ran just before it:
``report.balanced_rounds``; the .json keeps each one's median by the one before it, ``--by-predecessor`` prints
it); a sample is the slowest rank's time over a loop of calls (``nbcoll.comm.calibrate.calls_per_sample``), and
the table keeps the median of the repeats. Before its samples, each contender runs one sample's worth of calls
untimed, as nccl-tests' warm-up iterations do. A ratio is the peer's time over the best nbcoll algorithm's time,
which is also nbcoll's busbw over the peer's (the same bytes and the same factor divide both). The results of every
library are compared element by element on exact inputs.

Run::

    python benchmarks/vs_mpi.py                     # launches itself on 2 and then 4 ranks, numpy backend
    mpiexec -n 4 python benchmarks/vs_mpi.py        # one rank count
    python benchmarks/vs_mpi.py --quick             # a few small sizes, for a smoke test
    python benchmarks/vs_mpi.py --peers mpi         # MPI only (no torch needed or imported)
    python benchmarks/vs_mpi.py --bind-to core      # pin each rank to a core, in turn
    python benchmarks/vs_mpi.py --ll-step reference # small collectives through the NumPy references
    python benchmarks/vs_mpi.py --by-predecessor    # also each contender's time by the one that ran before it

nbcoll's small direct collectives run their LL step through compiled loops here (``NBCOLL_LL_COMPILED=1``), as a
long job of small collectives would set it; ``--ll-step reference`` times nbcoll's default instead, which spares a
process the compiler's start-up (the docs' Performance page, *The LL step compiled*). The tables say which it was.

Started plainly, it leaves the ranks' placement to the scheduler; ``--bind-to core`` pins each rank to a core in
turn (``mpiexec -bind-to core``), as latency benchmarks are often run. Every library runs in the same ranks, so
all see the same placement either way, and the tables say which it was.

It writes ``vs_mpi_<n>ranks.json`` and ``.rst`` (the tables of the docs' Performance page) into ``--out``
(default ``benchmarks/results``), and the plot ``vs_mpi_<n>ranks.png`` into ``--plot-dir`` (default
``docs/_static``, where the docs find their images).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import report
from ranks import environment, interleaved_samples, run_on_ranks

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
FULL_SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [8, 4 << 10, 64 << 10]
PEERS = ("MPI", "gloo")
"""The contenders that are not nbcoll algorithms."""
TARGET = 1.0
"""The goal: nbcoll's best algorithm reaches this fraction of MPI's busbw from 1 MiB up."""
REPEATS = 11
"""Timed samples per size and contender. A median of five moved with single slow samples on this project's 2-core
machine: alternating launches of five and eleven met the whole target in one of six and four of six (the docs'
Performance page, *Eleven repeats*)."""
HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="three small sizes and two repeats (a smoke test)")
    p.add_argument("--ranks", default="2,4", help="rank counts to launch when not under mpiexec (default 2,4)")
    p.add_argument("--repeats", type=int, default=None, help=f"samples per size and contender ({REPEATS})")
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma-separated subset")
    p.add_argument("--min-bytes", type=int, default=None, help="start the sweep at this size")
    p.add_argument("--max-bytes", type=int, default=None, help="stop the sweep at this size")
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .json, .rst and .png")
    p.add_argument("--plot-dir", default=str(HERE.parent / "docs" / "_static"), help="directory for the .png")
    p.add_argument("--no-plot", action="store_true", help="skip the plot (no matplotlib needed)")
    p.add_argument("--peers", default="mpi,gloo", help="comma-separated: mpi (always run), gloo (default mpi,gloo)")
    p.add_argument(
        "--bind-to",
        default="none",
        choices=("none", "core"),
        help="when it launches itself: leave placement to the scheduler (default), or pin each rank to a core in turn",
    )
    p.add_argument(
        "--ll-step",
        default="compiled",
        choices=("compiled", "reference"),
        help="nbcoll's LL step on the numpy backend: compiled loops (NBCOLL_LL_COMPILED=1, as a long job of small "
        "collectives sets it; the default here) or the NumPy references (nbcoll's own default)",
    )
    p.add_argument(
        "--by-predecessor",
        action="store_true",
        help="also print each contender's median time by the contender that ran just before it (always in the .json)",
    )
    p.add_argument(
        "--no-register",
        action="store_true",
        help="plain NumPy buffers instead of registered ones from comm.alloc (every library uses the same buffers)",
    )
    return p.parse_args(argv)


# -------------------------------------------------------------------------------------------------------------
# One rank's work.


def mpi_call(world, collective: str, send: np.ndarray, recv: np.ndarray):
    from mpi4py import MPI

    if collective == "all_reduce":
        return lambda: world.Allreduce(send, recv, op=MPI.SUM)
    if collective == "all_gather":
        return lambda: world.Allgather(send, recv)
    if collective == "reduce_scatter":
        return lambda: world.Reduce_scatter_block(send, recv, op=MPI.SUM)
    if collective == "broadcast":
        return lambda: world.Bcast(recv, root=0)
    return lambda: world.Alltoall(send, recv)


def nbcoll_call(comm, collective: str, algo: str, send: np.ndarray, recv: np.ndarray):
    if collective == "all_reduce":
        return lambda: comm.all_reduce(send, recv, algo=algo)
    if collective == "all_gather":
        return lambda: comm.all_gather(send, recv, algo=algo)
    if collective == "reduce_scatter":
        return lambda: comm.reduce_scatter(send, recv, algo=algo)
    if collective == "broadcast":  # in place, as MPI's Bcast: the root's buffer already holds the data
        return lambda: comm.broadcast(recv, root=0, algo=algo)
    return lambda: comm.all_to_all(send, recv, algo=algo)


def buffers(collective: str, count: int, rank: int, nranks: int, alloc=None) -> tuple[np.ndarray, np.ndarray]:
    """Exact inputs (see :mod:`nbcoll.perf.exact`) and an output buffer, as the collective's shapes need.

    ``alloc(count)`` makes the input (``comm.alloc``: registered, so nbcoll's peers read it in place); by default
    a plain NumPy array.
    """
    from nbcoll.perf import exact

    n_in = count * nranks if collective in ("reduce_scatter", "all_to_all") else count
    n_out = count * nranks if collective in ("all_gather", "all_to_all") else count
    source = 0 if collective == "broadcast" else rank
    values = exact.rank_input(source, "sum", np.dtype(np.float32), 0, n_in)
    send = values if alloc is None else alloc(n_in)
    send[...] = values
    return send, np.zeros(n_out, np.float32)


def measure(world, comm, collective: str, nbytes: int, repeats: int, gloo=None, register: bool = True) -> dict:
    """Median seconds of MPI, gloo and every nbcoll algorithm at one size, and whether their results agree.

    ``register``: the input comes from ``comm.alloc`` (NCCL's registered buffers); MPI and gloo read the same
    one, so every library works on the same memory.
    """
    from nbcoll.comm.algorithms import ALGORITHMS
    from nbcoll.comm.calibrate import calls_per_sample
    from nbcoll.perf import bandwidth

    n, rank = comm.size, comm.rank
    count = max(1, bandwidth.block_count(collective, nbytes, np.dtype(np.float32), n))  # at least one element
    nbytes = bandwidth.total_bytes(collective, count, np.dtype(np.float32), n)
    alloc = (lambda k: comm.alloc(k, np.float32)) if register else None
    send, recv_mpi = buffers(collective, count, rank, n, alloc)
    if collective == "broadcast":
        recv_mpi[...] = send if rank == 0 else 0
    contenders = {"MPI": mpi_call(world, collective, send, recv_mpi)}
    results = {}
    if gloo is not None:
        results["gloo"] = recv_mpi.copy()  # a broadcast root's buffer already holds the data
        contenders["gloo"] = gloo.call(collective, send, results["gloo"])
    lent = [send] if register else []  # registered buffers, freed at the end
    for algo in ALGORITHMS[collective]:
        recv = np.zeros_like(recv_mpi)
        if collective == "broadcast":  # in place: the root lends this buffer when it is registered
            recv = alloc(recv.size) if register else recv
            recv[...] = recv_mpi
            lent += [recv] if register else []
        results[algo] = recv
        contenders[algo] = nbcoll_call(comm, collective, algo, send, recv)
    inner = calls_per_sample(nbytes)  # the calibration's rule, for every library alike
    for call in contenders.values():  # warm-up, one sample's worth (nccl-tests' -w): connections, first touch of
        for _ in range(inner):  # pages, and what the cell before left cold; its first samples ran 1.8-2.5x slower
            call()
    agree = all(np.array_equal(out, recv_mpi) for out in results.values())
    agree = world.allreduce(agree, op=__import__("mpi4py").MPI.LAND)
    samples, trail = interleaved_samples(world, contenders, repeats, inner)
    for buffer in lent:
        comm.free(buffer)
    medians = {name: statistics.median(s) for name, s in samples.items()}
    algos = [a for a in medians if a not in PEERS]
    best = min(algos, key=lambda a: medians[a])
    factor = bandwidth.bus_factor(collective, n)
    row = {
        "collective": collective,
        "nbytes": nbytes,
        "count": count,
        "seconds": medians,
        "best": best,
        "ratio": medians["MPI"] / medians[best],
        "mpi_busbw": nbytes / medians["MPI"] / 1e9 * factor,
        "best_busbw": nbytes / medians[best] / 1e9 * factor,
        "agree": bool(agree),
        "registered": register,
        "after": report.medians_by_predecessor(trail),
    }
    if "gloo" in medians:
        row["gloo_ratio"] = medians["gloo"] / medians[best]
        row["gloo_busbw"] = nbytes / medians["gloo"] / 1e9 * factor
    return row


def format_table(rows: list[dict], nranks: int) -> str:
    """nccl-tests style: per size, every contender's time, then busbw of MPI, gloo and nbcoll's best, and ratios."""
    names = list(rows[0]["seconds"])
    gloo = "gloo" in names
    times = "".join(f"{a[:10] + '(us)':>16}" for a in names)
    peers = f"{'MPI':>9}{'gloo':>9}" if gloo else f"{'MPI':>9}"
    ratios = f"{'xMPI':>7}{'xgloo':>7}" if gloo else f"{'xMPI':>7}"
    lines = [
        f"# {rows[0]['collective']}, {nranks} ranks, float32 sum, "
        f"{'registered' if rows[0].get('registered') else 'plain'} input; "
        "busbw in GB/s; x<peer> = nbcoll busbw / peer busbw",
        f"#{'size (B)':>11}{'count':>10}{times} | busbw:{peers}{'nbcoll':>9}{'best':>18}{ratios}",
    ]
    for r in rows:
        cells = "".join(f"{r['seconds'][a] * 1e6:16.1f}" for a in names)
        bws = f"{r['mpi_busbw']:9.4f}" + (f"{r['gloo_busbw']:9.4f}" if gloo else "")
        xs = f"{r['ratio']:7.2f}" + (f"{r['gloo_ratio']:7.2f}" if gloo else "")
        mark = "" if r["agree"] else "  RESULTS DIFFER"
        lines.append(
            f"{r['nbytes']:12d}{r['count']:10d}{cells} |       {bws}{r['best_busbw']:9.4f}{r['best']:>18}{xs}{mark}"
        )
    return "\n".join(lines)


def verdict(all_rows: dict[str, list[dict]]) -> str:
    """One sentence on the target: the ratios from 1 MiB up, the lowest and the median, and whether it is met."""
    large = [r for rows in all_rows.values() for r in rows if r["nbytes"] >= 1 << 20]
    if not large:
        return "No size of 1 MiB or more was measured." + gloo_verdict(all_rows)
    worst = min(large, key=lambda r: r["ratio"])
    median = statistics.median(r["ratio"] for r in large)
    met = "met" if worst["ratio"] >= TARGET else "not met"
    per_collective = ", ".join(
        f"{c} {min(r['ratio'] for r in rows if r['nbytes'] >= 1 << 20):.2f}-"
        f"{max(r['ratio'] for r in rows if r['nbytes'] >= 1 << 20):.2f}"
        for c, rows in all_rows.items()
        if any(r["nbytes"] >= 1 << 20 for r in rows)
    )
    text = (
        f"From 1 MiB up, the best nbcoll algorithm reached {worst['ratio']:.2f}x to "
        f"{max(r['ratio'] for r in large):.2f}x MPI's busbw (median {median:.2f}x; per collective: {per_collective}). "
        f"The {TARGET}x target is {met}; the lowest ratio is {worst['collective']} at {worst['nbytes']} B."
    )
    return text + gloo_verdict(all_rows)


def gloo_verdict(all_rows: dict[str, list[dict]]) -> str:
    """One sentence on gloo at every size: the lowest and median ratio, and where nbcoll is behind."""
    rows = [r for rows in all_rows.values() for r in rows if "gloo_ratio" in r]
    if not rows:
        return ""
    behind = [f"{r['collective']} {r['nbytes']} B ({r['gloo_ratio']:.2f}x)" for r in rows if r["gloo_ratio"] < 1]
    median = statistics.median(r["gloo_ratio"] for r in rows)
    lowest, highest = min(r["gloo_ratio"] for r in rows), max(r["gloo_ratio"] for r in rows)
    where = f"; below 1.0x at {', '.join(behind)}" if behind else "; at least 1.0x everywhere"
    return f" Against gloo, at every size: {lowest:.2f}x to {highest:.2f}x (median {median:.2f}x){where}."


def format_rst(all_rows: dict[str, list[dict]], env: dict, nranks: int, command: str) -> str:
    """The docs' tables: per collective, size, MPI busbw, best nbcoll busbw, its algorithm and the ratio."""
    out = [
        f".. generated by benchmarks/vs_mpi.py on {env['date']}; do not edit by hand",
        "",
        f"**{nranks} ranks**, {env['backend']} backend, float32 sum; {env['date']} on ``{env['host']}`` "
        f"({env['machine']}); Python {env['python']}, NumPy {env['numpy']}, mpi4py {env['mpi4py']}, "
        f"{env['mpi']}; {env.get('placement', 'ranks placed by the scheduler')}; "
        f"{env.get('ll_step', 'LL step: references')}; medians of {env.get('repeats', '5')} interleaved repeats. "
        f"Command: ``{command}``.",
        "",
        verdict(all_rows),
        "",
    ]
    for collective, rows in all_rows.items():
        gloo = "gloo_ratio" in rows[0]
        header = ["size (B)", "MPI busbw", *(["gloo busbw"] if gloo else []), "nbcoll best", "algorithm"]
        header += ["ratio to MPI", *(["ratio to gloo"] if gloo else [])]
        cells = []
        for r in rows:
            flag = " (results differ)" if not r["agree"] else ""
            row = [str(r["nbytes"]), f"{r['mpi_busbw']:.4f}", *([f"{r['gloo_busbw']:.4f}"] if gloo else [])]
            row += [f"{r['best_busbw']:.4f}", r["best"], f"{r['ratio']:.2f}{flag}"]
            cells.append(row + ([f"{r['gloo_ratio']:.2f}"] if gloo else []))
        title = f"{collective}, {nranks} ranks (busbw in GB/s; ratio = nbcoll busbw / peer busbw)"
        out += report.list_table(header, cells, title)
        out.append("")
    return "\n".join(out)


def draw(all_rows: dict[str, list[dict]], nranks: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for collective, rows in all_rows.items():
        ax.plot([r["nbytes"] for r in rows], [r["ratio"] for r in rows], marker="o", label=collective)
    ax.axhline(TARGET, color="gray", linestyle="--", label=f"target {TARGET}x")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size S (bytes)")
    ax.set_ylabel("nbcoll busbw / MPI busbw")
    ax.set_title(f"nbcoll (best algorithm) vs MPI, {nranks} ranks")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_rank(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from nbcoll.comm import CommConfig, init

    world = MPI.COMM_WORLD
    config = dataclasses.replace(CommConfig.from_env(), ll_compiled=args.ll_step == "compiled")
    comm = init(world, config)
    n = comm.size
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.max_bytes:
        sizes = [s for s in sizes if s <= args.max_bytes]
    if args.min_bytes:
        sizes = [s for s in sizes if s >= args.min_bytes]
    repeats = args.repeats or (2 if args.quick else REPEATS)
    gloo = None
    if "gloo" in args.peers.split(","):
        import gloo_peer

        gloo, why_not = gloo_peer.start(world)
        if gloo is None and comm.rank == 0:
            print(f"# {why_not}", flush=True)
    all_rows: dict[str, list[dict]] = {}
    for collective in args.collectives.split(","):
        rows = [measure(world, comm, collective, size, repeats, gloo, not args.no_register) for size in sizes]
        all_rows[collective] = rows
        if comm.rank == 0:
            print(format_table(rows, n), flush=True)
            if args.by_predecessor:
                print(report.format_by_predecessor(rows, f"{rows[0]['collective']}, {n} ranks"), flush=True)
    if gloo is not None:
        gloo.close()
    bound = world.allreduce(len(os.sched_getaffinity(0)) == 1, op=MPI.LAND)  # how the ranks really were placed
    if comm.rank == 0:
        env = environment()
        env["placement"] = "each rank bound to one core" if bound else "ranks placed by the scheduler"
        env["ll_step"] = "compiled LL step (NBCOLL_LL_COMPILED=1)" if config.ll_compiled else "LL step: references"
        env["repeats"] = str(repeats)
        if gloo is not None:
            env["torch"] = gloo.version
        flags = (" --quick" if args.quick else "") + ("" if args.peers == "mpi,gloo" else f" --peers {args.peers}")
        flags += " --no-register" if args.no_register else ""
        flags += "" if args.ll_step == "compiled" else f" --ll-step {args.ll_step}"
        flags += "" if args.bind_to == "none" else f" --bind-to {args.bind_to}"
        flags += "" if args.repeats is None else f" --repeats {args.repeats}"
        flags += "" if args.collectives == ",".join(COLLECTIVES) else f" --collectives {args.collectives}"
        flags += "" if args.min_bytes is None else f" --min-bytes {args.min_bytes}"
        flags += "" if args.max_bytes is None else f" --max-bytes {args.max_bytes}"
        command = f"python benchmarks/vs_mpi.py{flags}  (mpiexec -n {n})"
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = out / f"vs_mpi_{n}ranks{'_quick' if args.quick else ''}"
        report.write_json(stem.with_suffix(".json"), {"env": env, "nranks": n, "results": all_rows})
        stem.with_suffix(".rst").write_text(format_rst(all_rows, env, n, command))
        if not args.no_plot:
            Path(args.plot_dir).mkdir(parents=True, exist_ok=True)
            draw(all_rows, n, Path(args.plot_dir) / f"{stem.name}.png")
        print(f"# {verdict(all_rows)}")
        differ = [r for rows in all_rows.values() for r in rows if not r["agree"]]
        print(f"# results equal to MPI's: {'yes' if not differ else f'NO ({len(differ)} sizes differ)'}")
        plot = "" if args.no_plot else f" and {Path(args.plot_dir) / stem.name}.png"
        print(f"# wrote {stem}.json, .rst{plot}", flush=True)
    comm.destroy()
    return 0 if all(r["agree"] for rows in all_rows.values() for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_on_ranks(__file__, run_rank, args, argv, bind_to=args.bind_to)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
