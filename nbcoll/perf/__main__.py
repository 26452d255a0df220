"""The perf tool's command line, with nccl-tests' options where they make sense.

Example::

    mpiexec -n 4 python -m nbcoll.perf all_reduce -b 8 -e 8M -f 4 --backend numpy
    mpiexec -n 4 python -m nbcoll.perf all_reduce -b 8 -e 1K -f 4 -o all -d all -J results.json

The exit status is 0 when every check passed, 1 when any element was wrong, 2 for a usage error (an output file
that cannot be written among them: checked before the sweep, and named if writing it fails at the end, after the
table is printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import nbcoll
from nbcoll.perf import bandwidth, exact, table
from nbcoll.perf.sweep import AVERAGES, Options, algorithms_of, check_root, run

_AVERAGE_NUMBERS = {"0": "rank0", "1": "avg", "2": "min", "3": "max"}


def _collective_name(text: str) -> str:
    """``all_reduce``, ``allreduce`` and ``All-Reduce`` all name the same collective (NBCOLL_ALGO accepts both)."""
    key = text.strip().lower().replace("_", "").replace("-", "")
    for name in bandwidth.COLLECTIVES:
        if name.replace("_", "") == key:
            return name
    raise argparse.ArgumentTypeError(f"unknown collective {text!r}; expected one of {', '.join(bandwidth.COLLECTIVES)}")


def default_backend(requested: str | None, environ: dict[str, str] | None = None) -> str:
    """The backend a sweep runs on: ``--backend``, else ``NBCOLL_BACKEND``, else ``cuda`` on a GPU, else ``numpy``.

    Without a GPU the device backend is the simulator, about 150 us per CUDA thread: a sweep there takes hours,
    so perf measures the NumPy references unless the simulator is asked for by name.
    """
    import os

    environ = os.environ if environ is None else environ
    if requested is not None:
        return requested
    if environ.get("NBCOLL_BACKEND", "").strip():
        return nbcoll.get_backend()
    return "cuda" if nbcoll.backend.device_backend() == "cuda" else "numpy"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m nbcoll.perf",
        description="Measure one collective and print nccl-tests' table (run under mpiexec).",
    )
    p.add_argument(
        "collective", type=_collective_name, help=f"one of {', '.join(bandwidth.COLLECTIVES)} (allreduce works too)"
    )
    p.add_argument("-b", "--minbytes", default="32M", help="smallest size S in bytes, e.g. 8, 64K, 8M (default 32M)")
    p.add_argument("-e", "--maxbytes", default="32M", help="largest size S in bytes (default 32M)")
    p.add_argument("-f", "--stepfactor", type=int, default=None, help="multiply the size by this factor each step")
    p.add_argument("-i", "--stepbytes", default=None, help="add this many bytes each step (instead of -f)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size (default 20)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed iterations first (default 5)")
    p.add_argument("-c", "--check", type=int, default=1, help="check the result this many times (0: never)")
    p.add_argument("-o", "--op", default="sum", help=f"reduction op: {', '.join(exact.OPS)} or all (default sum)")
    p.add_argument("-d", "--datatype", default="float", help="dtype (float, half, int8, float64, ...) or all")
    p.add_argument("-r", "--root", type=int, default=0, help="root rank of broadcast, reduce, gather, scatter")
    p.add_argument("-a", "--average", default="avg", help="combine ranks' times: avg, min, max or rank0 (or 1/2/3/0)")
    p.add_argument("-J", "--output_file", default=None, help="also write the results to this JSON file")
    p.add_argument("--algo", default=None, help="algorithm name, comma-separated names, or all (default: tuner)")
    p.add_argument("--transport", choices=("ipc", "mpi"), default=None, help="force one transport for every peer")
    p.add_argument(
        "--backend",
        choices=nbcoll.BACKENDS,
        default=None,
        help="numpy, or the process's device backend (default: cuda on a GPU, else numpy unless NBCOLL_BACKEND says)",
    )
    p.add_argument("--plot", default=None, help="draw busbw against size, one line per algorithm, into this image")
    p.add_argument(
        "--progress", choices=("auto", "on", "off"), default="auto", help="progress lines (auto: sweeps of 20+ tests)"
    )
    return p


def _dtypes(text: str) -> list[np.dtype]:
    if text.strip().lower() == "all":
        return list(nbcoll.DTYPES)
    out = []
    for name in text.split(","):
        name = name.strip().lower()
        name = table.TYPE_ALIASES.get(name, name)
        try:
            out.append(nbcoll.memory.check_dtype(name, "-d"))
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    return out


def _ops(text: str) -> list[str]:
    if text.strip().lower() == "all":
        return list(exact.OPS)
    ops = [o.strip().lower() for o in text.split(",")]
    ops = ["premul_sum" if op == "mulsum" else op for op in ops]
    for op in ops:
        if op not in exact.OPS:
            raise ValueError(f"-o: unknown op {op!r}; expected one of {', '.join(exact.OPS)} or all")
    return ops


def options_from(args: argparse.Namespace) -> Options:
    """Check the command line and turn it into :class:`~nbcoll.perf.sweep.Options`."""
    step = None if args.stepbytes is None else bandwidth.parse_size(args.stepbytes)
    factor = args.stepfactor
    if factor is None and step is None:
        factor = 2
    sizes = bandwidth.size_sweep(bandwidth.parse_size(args.minbytes), bandwidth.parse_size(args.maxbytes), factor, step)
    average = _AVERAGE_NUMBERS.get(args.average, args.average)
    if average not in AVERAGES:
        raise ValueError(f"-a: expected one of {', '.join(AVERAGES)} or 0-3, got {args.average!r}")
    progress = {"on": True, "off": False}.get(args.progress, None)
    return Options(
        collective=args.collective,
        sizes=sizes,
        iters=args.iters,
        warmup=args.warmup_iters,
        check=args.check,
        ops=_ops(args.op),
        dtypes=_dtypes(args.datatype),
        root=args.root,
        average=average,
        algos=algorithms_of(args.collective, args.algo),
        progress=progress,
    )


def _where() -> str:
    """When, on which machine, and with which versions: the line that dates a table."""
    import os

    import mpi4py
    from mpi4py import MPI

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mpi = " ".join(MPI.Get_library_version().split()[:3])
    return (
        f"{now} on {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs); nbcoll {nbcoll.__version__}, "
        f"Python {platform.python_version()}, NumPy {np.__version__}, mpi4py {mpi4py.__version__}, {mpi}"
    )


def _command_line(nranks: int, argv: Sequence[str]) -> str:
    """The command that really ran: with ``mpiexec -n N`` only when a launcher started this process."""
    from nbcoll.launch import under_mpi

    command = " ".join(["python -m nbcoll.perf", *argv])
    return f"mpiexec -n {nranks} {command}" if under_mpi() else command


def _unwritable(option: str, path: str | None) -> str:
    """Why ``path`` (the file of ``option``) cannot be written, or ``""`` if it can (or none was asked for)."""
    if path is None:
        return ""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        why = "it is a directory; expected a file name"
    elif not folder.exists():
        why = f"the directory {folder} does not exist"
    elif not folder.is_dir():
        why = f"{folder} is not a directory"
    elif not os.access(folder, os.W_OK | os.X_OK):
        why = f"the directory {folder} is not writable"
    else:
        return ""
    return f"{option}: cannot write {path}: {why}"


def _output_problems(args: argparse.Namespace) -> list[str]:
    """What would keep the sweep's files from being written: checked before anything runs."""
    problems = [_unwritable("-J", args.output_file), _unwritable("--plot", args.plot)]
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        problems.append("--plot: needs matplotlib (pip install matplotlib)")
    return [problem for problem in problems if problem]


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _write_json(path: str, report: dict) -> None:
    """Replace ``path`` in one step: a reader never sees half a file."""
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        json.dump(report, f, indent=2)
    os.replace(partial, path)


def _json_report(rows: list[table.Row], comm: object, args: argparse.Namespace, complete: bool = True) -> dict:
    return {
        "tool": "nbcoll.perf",
        "complete": complete,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "backend": nbcoll.get_backend(),
        "nranks": comm.size,
        "command": _command_line(comm.size, sys.argv[1:]),
        "where": _where(),
        "collective": args.collective,
        "bus_factor": bandwidth.bus_factor(args.collective, comm.size),
        "avg_busbw": table.average_busbw(rows),
        "wrong": table.wrong_total(rows),
        "rows": [dataclasses.asdict(r) for r in rows],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        nbcoll.set_backend(default_backend(args.backend))
        options = options_from(args)
    except (ValueError, nbcoll.BackendError) as exc:
        print(f"nbcoll.perf: {exc}", file=sys.stderr)
        return 2

    from mpi4py import MPI

    from nbcoll.comm import CommConfig, init

    config = CommConfig.from_env()
    if args.transport is not None:
        config = dataclasses.replace(config, transport=args.transport)
    world = MPI.COMM_WORLD
    # Rank 0 alone writes the files, so it alone looks; every rank hears its verdict, so that all stop together.
    problems = world.bcast(_output_problems(args) if world.Get_rank() == 0 else None, root=0)
    if problems:
        if world.Get_rank() == 0:
            print("\n".join(f"nbcoll.perf: {problem}" for problem in problems), file=sys.stderr)
        return 2
    comm = init(world, config)
    lead = comm.rank == 0
    try:
        check_root(options, comm.size)
    except ValueError as exc:
        if lead:
            print(f"nbcoll.perf: {exc}", file=sys.stderr)
        comm.destroy()
        return 2
    if lead:
        algo_text = ", ".join(a or "tuner's choice" for a in options.algos)
        print(f"# nbcoll.perf {args.collective}: {comm.size} ranks, backend {nbcoll.get_backend()}, algo {algo_text}")
        print(f"# {_where()}")
        print(f"# command: {_command_line(comm.size, sys.argv[1:] if argv is None else argv)}")
        if comm.size == 1:
            print("# note: one rank, so nothing crosses a link; run it as mpiexec -n 4 python -m nbcoll.perf ...")
        print(
            f"# iters {options.iters}, warm-up {options.warmup}, check {options.check}, "
            f"time over ranks: {options.average}, busbw factor {bandwidth.bus_factor(args.collective, comm.size):.4g}"
        )
        print("#")
        print(table.header(), flush=True)
    current = {"algo": object()}
    so_far: list[table.Row] = []
    json_failed = False  # the -J file could not be written after a row: said once, tried again at the end

    def show(row: table.Row, algo: str | None) -> None:
        nonlocal json_failed
        if not lead:
            return
        if algo != current["algo"] and len(options.algos) > 1:
            print(f"# algo: {row.algo}")
        current["algo"] = algo
        print(table.row(row), flush=True)
        so_far.append(row)
        if args.output_file:  # after every size, so that a run stopped early still leaves its rows
            try:
                _write_json(args.output_file, _json_report(so_far, comm, args, complete=False))
            except OSError as exc:  # rank 0 goes on measuring with the others; the table still shows every row
                if not json_failed:
                    print(f"nbcoll.perf: -J: could not write {args.output_file}: {_reason(exc)}", file=sys.stderr)
                json_failed = True

    try:
        rows = run(comm, world, options, on_row=show)
    except ValueError as exc:
        if lead:
            print(f"nbcoll.perf: {exc}", file=sys.stderr)
        comm.destroy()
        return 2
    written = True
    if lead:
        print(table.footer(rows), flush=True)
        written = _write_files(rows, comm, args)
    comm.destroy()
    return 1 if table.wrong_total(rows) else 0 if written else 2


def _write_files(rows: list[table.Row], comm: object, args: argparse.Namespace) -> bool:
    """Write the JSON report and the plot, after the table is printed; a file that cannot be written is named on
    standard error (the results stand on standard output). False if one could not be written."""
    written = True
    if args.output_file:
        try:
            _write_json(args.output_file, _json_report(rows, comm, args, complete=True))
            print(f"# wrote {args.output_file}")
        except OSError as exc:
            print(f"nbcoll.perf: -J: could not write {args.output_file}: {_reason(exc)}", file=sys.stderr)
            written = False
    if args.plot:
        from nbcoll.perf import plot

        title = f"{args.collective}, {comm.size} ranks, {nbcoll.get_backend()} backend"
        try:
            print(f"# wrote {plot.draw(rows, args.plot, title)}")
        except (OSError, ValueError, RuntimeError) as exc:  # a format matplotlib does not know is a ValueError
            print(f"nbcoll.perf: --plot: could not write {args.plot}: {_reason(exc)}", file=sys.stderr)
            written = False
    return written


if __name__ == "__main__":
    sys.exit(main())
