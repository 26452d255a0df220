"""Direct windows of one ``NBCOLL_BUFFSIZE`` against ``NBCOLL_BUFFSIZE`` for every two ranks.

An all-to-all's round stages a piece for every reader in one half of the window, so the window's size sets its
pieces (:func:`nbcoll.comm.protocol_direct.window_bytes`). Two communicators of the same ranks run the same
direct all-to-all and reduce-scatter, one with windows of 4 MiB (the ``NBCOLL_BUFFSIZE`` that gives that size) and
one with the default (8 MiB at 3 and 4 ranks), on registered buffers (``comm.alloc``, read in place) and on plain
ones (staged through the window), each communicator on its own buffers, alternated in ABBA order, repeat by repeat.
The table gives the median time per call of each and their ratio. At 2 ranks both windows are 4 MiB, so their
ratio there is this machine's noise. A reduce-scatter keeps its round within ``FOLD_ROUND_BYTES`` either way.

Run::

    python benchmarks/lab/windows.py                          # 2 and 4 ranks, numpy backend, 1 to 64 MiB
    python benchmarks/lab/windows.py --ranks 4 --sizes 4M,16M --repeats 5

Writes ``windows_<n>ranks.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
import report
from ranks import sample

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all_to_all", "reduce_scatter")
FIXED_WINDOW = 4 << 20


def contender(comm, collective: str, nbytes: int, registered: bool):
    """One direct call on buffers of its own, and a check that its result is exact (integer inputs)."""
    n, r = comm.size, comm.rank
    block = max(1, nbytes // 4 // n)
    values = (np.arange(n * block) % 1000 + r).astype(np.int32)
    src = comm.alloc(n * block, np.int32) if registered else np.empty(n * block, np.int32)
    src[...] = values
    out = np.zeros(n * block if collective == "all_to_all" else block, np.int32)
    mine = np.arange(r * block, (r + 1) * block) % 1000
    want = np.concatenate([mine + p for p in range(n)]) if collective == "all_to_all" else n * mine + n * (n - 1) // 2
    call = getattr(comm, collective)
    return (lambda: call(src, out, algo="direct")), (lambda: np.array_equal(out, want)), src if registered else None


def measure(comms: dict[str, object], world, sizes: list[int], repeats: int) -> tuple[dict, int]:
    """(collective, registered, nbytes, window) -> seconds per call of each repeat; and how many results differ."""
    times: dict[tuple, list[float]] = {}
    wrong = 0
    for collective in COLLECTIVES:
        for registered in (True, False):
            for nbytes in sizes:
                made = {name: contender(comm, collective, nbytes, registered) for name, comm in comms.items()}
                calls = max(1, min(20, (16 << 20) // nbytes))
                for call, _, _ in made.values():  # warm-up: windows, first touch of pages
                    call()
                for k in range(repeats):
                    order = list(made) if k % 2 == 0 else list(reversed(made))
                    for name in order:
                        seconds = sample(world, made[name][0], calls)
                        times.setdefault((collective, registered, nbytes, name), []).append(seconds)
                for name, (_, exact, lent) in made.items():
                    wrong += not exact()
                    if lent is not None:
                        comms[name].free(lent)
    return times, wrong


def table(times: dict, sizes: list[int], names: list[str], nranks: int, wrong: int, command: str) -> str:
    reading = ("Median time per call (us) over ABBA-interleaved repeats; ratio = the second window's time over the "
               "first's (below 1: the second is faster); results that differ from the exact ones: "
               f"{wrong}. Command: ``{command}``.")  # fmt: skip
    lines = report.same_run_caption(__file__, nranks, "int32, direct algorithm", reading)
    rows = []
    for collective in COLLECTIVES:
        for registered in (True, False):
            for nbytes in sizes:
                first, second = (float(np.median(times[(collective, registered, nbytes, name)])) for name in names)
                rows.append([collective, "registered" if registered else "plain", str(nbytes),
                             f"{first * 1e6:.0f}", f"{second * 1e6:.0f}", f"{second / first:.2f}"])  # fmt: skip
    header = ["collective", "buffers", "size (B)", *[f"window {name}" for name in names], "ratio"]
    lines += report.list_table(header, rows, f"direct windows of two sizes, {nranks} ranks")
    return "\n".join(lines) + "\n"


def compare(args, world, sizes: list[int]) -> int:
    """Both window sizes at every size, in one launch; rank 0 writes the table. 1 if a result was wrong."""
    from nbcoll.comm import CommConfig, init
    from nbcoll.comm.algorithms import direct

    n, base = world.Get_size(), CommConfig.from_env()
    fixed = dataclasses.replace(base, buffsize=FIXED_WINDOW // ((n + 1) // 2))  # a window of FIXED_WINDOW
    configs = [fixed, base]
    names = [f"{direct.window_bytes(c.buffsize, n) >> 20} MiB" for c in configs]
    if names[0] == names[1]:
        names[1] += " (again)"
    comms = {name: init(world, config) for name, config in zip(names, configs, strict=True)}
    times, wrong = measure(comms, world, sizes, args.repeats)
    for comm in comms.values():
        comm.destroy()
    return report.publish_same_run(
        world, args, __file__, "windows", lambda command, wrong: table(times, sizes, names, n, wrong, command), wrong
    )


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report.same_run_main(__file__, description, "1M,4M,16M,64M", HERE / "results", compare, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
