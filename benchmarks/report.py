"""What every benchmark writes: the environment it ran in, its JSON record, and its tables for the docs.

A benchmark measures, then calls these three::

    env = environment(numba=numba.__version__)                  # date, host, machine, versions, backend
    write_json(stem.with_suffix(".json"), {"env": env, "results": rows})
    rst = list_table(["size (B)", "time (us)"], [[str(r["nbytes"]), f"{r['us']:.1f}"] for r in rows])

The JSON is written to a ``.partial`` file first and renamed, so that a run stopped midway never leaves a
half-written record in ``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np


def environment(**versions: str) -> dict[str, str]:
    """Where and with what the numbers were measured; ``versions`` (numba, mpi4py, ...) follow NumPy's."""
    import nbcoll

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    env.update(versions)
    env.update({"nbcoll": nbcoll.__version__, "backend": nbcoll.get_backend()})
    return env


def write_json(path: Path, report: dict[str, Any], indent: int | None = 2) -> None:
    """Write ``report`` to ``path`` whole or not at all (through ``path.partial`` and a rename)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=indent))
    partial.replace(path)


def list_table(header: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> list[str]:
    """The lines of an reST ``list-table`` with one header row: ``header`` then each row's cells, as given."""
    lines = [f".. list-table::{' ' + title if title else ''}", "   :header-rows: 1", ""]
    for cells in [header, *rows]:
        lines += [f"   * - {cells[0]}", *[f"     - {cell}" for cell in cells[1:]]]
    return lines


def launch_on_ranks(script: str, ranks: str, argv: Sequence[str], timeout: float = 3600) -> int:
    """Run ``script`` with ``argv`` under mpiexec once for each rank count of ``ranks`` ("2,4"), on the ``numpy``
    backend, printing rank 0's output; 1 as soon as a launch fails, else 0."""
    from nbcoll.launch import launch

    for nranks in (int(n) for n in ranks.split(",")):
        result = launch(nranks, script, args=list(argv), env={"NBCOLL_BACKEND": "numpy"}, timeout=timeout)
        print(result.outputs[0] if result.ok else result.report(), end="")
        if not result.ok:
            return 1
    return 0


def write_table(out: str | Path, name: str, text: str) -> Path:
    """Print an reST table and write it to ``out/name`` (the folder made if need be); its path."""
    print(text)
    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"# wrote {path}")
    return path


def same_run_arguments(
    description: str,
    sizes: str,
    out: Path,
    options: Callable[[argparse.ArgumentParser], None] | None = None,
    repeats: int = 7,
) -> argparse.ArgumentParser:
    """The options of a benchmark that compares two settings in one launch at each rank count: ``--sizes``,
    ``--repeats`` (default ``repeats``), ``--ranks`` (launched when not under mpiexec) and ``--out`` (where its
    tables go); ``options`` adds the benchmark's own."""
    parser = argparse.ArgumentParser(description=description)
    if options is not None:
        options(parser)
    parser.add_argument("--sizes", default=sizes, help="comma-separated sizes in bytes (8, 64K, 16M, ...)")
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--ranks", default="2,4", help="rank counts to launch when not under mpiexec")
    parser.add_argument("--out", default=str(out))
    return parser


def same_run_main(
    script: str,
    description: str,
    sizes: str,
    out: Path,
    compare: Callable[..., int],
    argv: Sequence[str] | None,
    options: Callable[[argparse.ArgumentParser], None] | None = None,
    repeats: int = 7,
) -> int:
    """The ``main`` of a benchmark that compares settings in one launch: parse :func:`same_run_arguments`; not under
    mpiexec, launch ``script`` at each rank count of ``--ranks``; under it, return ``compare(args, world, sizes)``,
    with MPI's world communicator and ``--sizes`` in bytes."""
    args = same_run_arguments(description, sizes, out, options, repeats).parse_args(argv)
    from nbcoll.launch import under_mpi

    if not under_mpi():
        return launch_on_ranks(script, args.ranks, sys.argv[1:] if argv is None else argv)
    from mpi4py import MPI

    from nbcoll.perf.bandwidth import parse_size

    return compare(args, MPI.COMM_WORLD, [parse_size(size) for size in args.sizes.split(",")])


def balanced_rounds(names: Sequence[str], repeats: int) -> list[list[str]]:
    """``repeats`` rounds that each time every one of ``names`` once, ordered so that each name follows each other
    about equally often, from one round into the next too.

    A contender's time depends on the one that ran just before it (the caches it left cold, the threads it woke),
    so no contender may keep one neighbour. A rotation by one per round does not do that: it keeps every
    neighbour but at the ends of the rounds (with four contenders, the one before a contender is the same in four
    samples of five). Here each round is, of every order of the names, the one that keeps the counts of
    (previous, next) pairs most even (the least sum of their squares, the first such order on ties), never
    running a name twice in a row; a handful of contenders makes a few hundred orders to try.

    >>> balanced_rounds(["a", "b", "c"], 4)          # b after a, c, a; c after b, a, b; a after c, b, c
    [['a', 'b', 'c'], ['a', 'c', 'b'], ['a', 'b', 'c'], ['a', 'c', 'b']]
    """
    pairs: Counter = Counter()
    rounds: list[list[str]] = []
    for _ in range(repeats):
        last = rounds[-1][-1] if rounds else None
        chosen = min(permutations(names), key=lambda order, last=last: _growth(pairs, last, order))
        pairs.update(_pairs(last, chosen))
        rounds.append(list(chosen))
    return rounds


def _pairs(last: str | None, order: Sequence[str]) -> list[tuple[str, str]]:
    """The (previous, next) pairs of ``order`` run after ``last`` (``None``: first of all)."""
    run = list(order) if last is None else [last, *order]
    return list(zip(run[:-1], run[1:], strict=True))


def _growth(pairs: Counter, last: str | None, order: Sequence[str]) -> int:
    """How much the sum of the squared pair counts grows if ``order`` runs after ``last``; a name twice in a row
    (the last round's last first again) never wins."""
    new = _pairs(last, order)
    if len(order) > 1 and any(a == b for a, b in new):
        return 1 << 60
    return sum(2 * pairs[pair] + 1 for pair in new)


def balanced_samples(world: Any, contenders_at: Callable[[str, int], tuple[dict, Callable[[], None]]],
                    collectives: Sequence[str], sizes: Sequence[int], repeats: int) -> tuple[dict, int]:  # fmt: skip
    """Time every contender of :func:`same_run_main` comparison at every collective and size, in one launch.

    ``contenders_at(collective, nbytes)`` gives ``{name: (call, exact)}`` (each on buffers of its own) and what frees
    them. Every call is warmed up for one sample's worth (windows, first touch of pages), then each repeat times
    every contender in turn, in :func:`balanced_rounds` (each follows each other about equally often). Returns
    ``(collective, nbytes, name) -> seconds per call of each repeat`` and how many results differ from the exact
    ones.
    """
    from vs_mpi import sample

    times: dict[tuple, list[float]] = {}
    wrong = 0
    for collective in collectives:
        for nbytes in sizes:
            made, free = contenders_at(collective, nbytes)
            calls = max(1, min(20, (16 << 20) // nbytes))
            for call, _ in made.values():
                for _ in range(calls):
                    call()
            for order in balanced_rounds(list(made), repeats):
                for name in order:
                    times.setdefault((collective, nbytes, name), []).append(sample(world, made[name][0], calls))
            wrong += sum(not exact() for _, exact in made.values())
            free()
    return times, wrong


def same_run_caption(script: str, nranks: int, setup: str, reading: str) -> list[str]:
    """The first lines of a same-run table: which script wrote it, then its caption: ``nranks``, the backend and
    ``setup``, when and on what machine it ran, and ``reading`` (how to read it, and the command)."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return [
        f".. generated by benchmarks/{Path(script).name}; do not edit by hand",
        "",
        f"**{nranks} ranks**, numpy backend, {setup}; {stamp} on ``{platform.node()}`` ({platform.machine()}, "
        f"{os.cpu_count()} CPUs). {reading}",
        "",
    ]


def median_table(script: str, setup: str, reading: str, times: dict, collectives: Sequence[str],
                 sizes: Sequence[int], names: Sequence[str], ratios: Sequence[tuple[str, str]], title: str,
                 nranks: int, wrong: int, command: str) -> str:  # fmt: skip
    """The reST table of :func:`balanced_samples`: a caption (``setup``, how to read the ratios, how many results
    were wrong, the command), then per collective and size the median microseconds of each of ``names`` and the
    ratio of the medians of each ``(numerator, denominator)`` pair of ``ratios``."""
    lines = same_run_caption(script, nranks, setup, f"Median time per call (us) over interleaved repeats; {reading}; "
                             f"results that differ from the exact ones: {wrong}. Command: ``{command}``.")  # fmt: skip
    rows = []
    for collective in collectives:
        for nbytes in sizes:
            median = {name: float(np.median(times[(collective, nbytes, name)])) for name in names}
            rows.append([collective, str(nbytes), *(f"{median[name] * 1e6:.0f}" for name in names),
                         *(f"{median[a] / median[b]:.2f}" for a, b in ratios)])  # fmt: skip
    header = ["collective", "size (B)", *names, *(f"{a} / {b}" for a, b in ratios)]
    return "\n".join(lines + list_table(header, rows, title)) + "\n"


def same_run_command(script: str, args: argparse.Namespace, nranks: int, flags: str = "") -> str:
    """The command line that reproduces a :func:`same_run_main` table, as its caption gives it (``flags``: the
    benchmark's own options)."""
    own = f" {flags}" if flags else ""
    return (f"python benchmarks/{Path(script).name}{own} --sizes {args.sizes} --repeats {args.repeats} "
            f"(mpiexec -n {nranks})")  # fmt: skip


def publish_same_run(world: Any, args: argparse.Namespace, script: str, stem: str, table: Callable[..., str],
                     wrong: int = 0, flags: str = "") -> int:  # fmt: skip
    """End a :func:`same_run_main` comparison: sum ``wrong`` (results that differ from the exact ones) over the
    ranks; rank 0 writes ``table(command, wrong)`` to ``args.out/<stem>_<n>ranks.rst``; 0, or 1 if any was wrong.
    ``flags``: the benchmark's own options, for the command the table gives."""
    from mpi4py import MPI

    wrong = world.allreduce(wrong, op=MPI.SUM)
    n = world.Get_size()
    if world.Get_rank() == 0:
        write_table(args.out, f"{stem}_{n}ranks.rst", table(same_run_command(script, args, n, flags), wrong))
    return 0 if wrong == 0 else 1
