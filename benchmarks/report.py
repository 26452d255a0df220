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

BENCHMARKS = Path(__file__).resolve().parent


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
    about equally often, from one round into the next too, and takes each place in a round about equally often.

    A contender's time depends on the ones that ran just before it (the caches they left cold or full of lines to
    write back, the threads they woke), so no contender may keep one neighbour. A rotation by one per round does
    not do that: it keeps every neighbour but at the ends of the rounds (with four contenders, the one before a
    contender is the same in four samples of five). Even neighbours are not enough either: with four contenders,
    orders that keep only the (previous, next) pairs even can still end nearly every round with the same one, two
    samples after the same other one each time. So each round is, of every order of the names, the one that keeps
    the counts of (previous, next) pairs most even (the least sum of their squares), never running a name twice
    in a row; among those, the one that keeps most even the counts of (two before, next) pairs and of each name's
    place in the round; the first such order on ties. A handful of contenders makes a few hundred orders to try.

    >>> balanced_rounds(["a", "b", "c"], 4)  # b after a, c, c, a; c after b, a, b, a; a after c, b, b
    [['a', 'b', 'c'], ['a', 'c', 'b'], ['c', 'b', 'a'], ['b', 'a', 'c']]
    """
    counts = _OrderCounts()
    rounds: list[list[str]] = []
    for _ in range(repeats):
        chosen = min(permutations(names), key=counts.growth)
        counts.add(chosen)
        rounds.append(list(chosen))
    return rounds


class _OrderCounts:
    """What :func:`balanced_rounds` keeps even over the rounds so far: (previous, next) pairs, (two before, next)
    pairs, and (place in the round, name)."""

    def __init__(self) -> None:
        self.run: list[str] = []
        self.neighbours: Counter = Counter()
        self.two_before: Counter = Counter()
        self.places: Counter = Counter()

    def _added(self, order: Sequence[str]) -> tuple[list, list, list]:
        """The three kinds of pairs that running ``order`` next would add."""
        run, start = [*self.run[-2:], *order], min(len(self.run), 2)  # where order starts in run
        neighbours = [(run[i - 1], run[i]) for i in range(max(start, 1), len(run))]
        two_before = [(run[i - 2], run[i]) for i in range(max(start, 2), len(run))]
        return neighbours, two_before, list(enumerate(order))

    def growth(self, order: Sequence[str]) -> tuple[int, int]:
        """How much the sums of the squared counts grow if ``order`` runs next: the neighbours' first, then the
        others'; a name twice in a row (the last round's last first again) never wins."""
        neighbours, two_before, places = self._added(order)
        if len(order) > 1 and any(a == b for a, b in neighbours):
            return 1 << 60, 0
        grow = lambda counts, added: sum(2 * counts[key] + 1 for key in added)  # noqa: E731
        return grow(self.neighbours, neighbours), grow(self.two_before, two_before) + grow(self.places, places)

    def add(self, order: Sequence[str]) -> None:
        neighbours, two_before, places = self._added(order)
        self.neighbours.update(neighbours)
        self.two_before.update(two_before)
        self.places.update(places)
        self.run += order


def medians_by_predecessor(trail: Sequence[tuple[str | None, str, float]]) -> dict[str, dict[str, float]]:
    """``{name: {before: median}}`` from samples ``(before, name, seconds)`` taken in a row: each contender's median
    time by the one that ran just before it (``before`` None, a sample with none before it, is left out).

    >>> medians_by_predecessor([(None, "a", 1.0), ("a", "b", 2.0), ("b", "a", 3.0), ("a", "b", 4.0)])
    {'a': {'b': 3.0}, 'b': {'a': 3.0}}
    """
    times: dict[str, dict[str, list[float]]] = {}
    for before, name, seconds in trail:
        if before is not None:
            times.setdefault(name, {}).setdefault(before, []).append(seconds)
    return {name: {b: float(np.median(t)) for b, t in sorted(by.items())} for name, by in sorted(times.items())}


def format_by_predecessor(rows: Sequence[dict], title: str) -> str:
    """Per size, each contender's median time a call (us) by the contender that ran just before it: the rows'
    ``after`` (:func:`medians_by_predecessor`); ``-`` where one never followed the other."""
    names = list(rows[0]["after"])
    lines = [
        f"# {title}: median us a call by the contender that ran just before",
        f"#{'size (B)':>11}{'contender':>18}" + "".join(f"{'after ' + b[:10]:>18}" for b in names),
    ]
    for row in rows:
        for name in names:
            after = row["after"].get(name, {})
            cells = "".join(f"{after[b] * 1e6:18.1f}" if b in after else f"{'-':>18}" for b in names)
            lines.append(f"{row['nbytes']:12d}{name[:16]:>18}{cells}")
    return "\n".join(lines)


def balanced_samples(world: Any, contenders_at: Callable[[str, int], tuple[dict, Callable[[], None]]],
                    collectives: Sequence[str], sizes: Sequence[int], repeats: int) -> tuple[dict, int]:  # fmt: skip
    """Time every contender of :func:`same_run_main` comparison at every collective and size, in one launch.

    ``contenders_at(collective, nbytes)`` gives ``{name: (call, exact)}`` (each on buffers of its own) and what frees
    them. Every call is warmed up for one sample's worth (windows, first touch of pages), then each repeat times
    every contender in turn, in :func:`balanced_rounds` (each follows each other about equally often). Returns
    ``(collective, nbytes, name) -> seconds per call of each repeat`` and how many results differ from the exact
    ones.
    """
    from ranks import interleaved_samples

    times: dict[tuple, list[float]] = {}
    wrong = 0
    for collective in collectives:
        for nbytes in sizes:
            made, free = contenders_at(collective, nbytes)
            calls = max(1, min(20, (16 << 20) // nbytes))
            for call, _ in made.values():
                for _ in range(calls):
                    call()
            samples, _ = interleaved_samples(world, {name: call for name, (call, _) in made.items()}, repeats, calls)
            times.update({(collective, nbytes, name): s for name, s in samples.items()})
            wrong += sum(not exact() for _, exact in made.values())
            free()
    return times, wrong


def script_path(script: str | Path) -> str:
    """``script`` as a command names it from the repository's root: ``benchmarks/vs_mpi.py``,
    ``benchmarks/lab/channels.py`` (the scripts of one trick each sit in ``benchmarks/lab``)."""
    path = Path(script).resolve()
    try:
        return "benchmarks/" + path.relative_to(BENCHMARKS).as_posix()
    except ValueError:  # a script outside benchmarks/: its name is all a command can say
        return path.name


def same_run_caption(script: str, nranks: int, setup: str, reading: str) -> list[str]:
    """The first lines of a same-run table: which script wrote it, then its caption: ``nranks``, the backend and
    ``setup``, when and on what machine it ran, and ``reading`` (how to read it, and the command)."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return [
        f".. generated by {script_path(script)}; do not edit by hand",
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
    return (f"python {script_path(script)}{own} --sizes {args.sizes} --repeats {args.repeats} "
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
