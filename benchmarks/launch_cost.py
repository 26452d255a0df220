"""What the host pays for each piece of a collective's step, one process, no profiler.

A step of a collective on a device is a few kernel launches on slices of the collective's buffers, and sometimes
a small copy back to the host (an LL poll's count). This script times each of those pieces alone, with the
platform's own floor beside them in the same run: a numba-cuda launch that nbcoll did not prepare.

- ``raw launch``: nbcoll's copy kernel as ``kernel[1, 32](dst, src)`` straight through numba-cuda (cuda and
  sim only);
- ``copy_chunk``: nbcoll's hot-path copy, the launch every chunk makes, with no checks;
- ``copy``: the same copy through its checked entry, as a user calls it;
- ``slice``: ``x[0:1]``, one device-array view, as a chunk of a buffer is cut;
- ``synchronize`` and ``to_host`` of 8 bytes;
- ``copy_chunk + synchronize`` of 16 MiB: a launch and the work it starts.

Each figure is the median over ``--rounds`` rounds of ``--count`` calls, in microseconds a call; the rows
rotate between rounds so that a slow phase of the machine does not fall on one row. Run::

    python benchmarks/launch_cost.py                          # the process's backend (cuda on a GPU machine)
    NBCOLL_BACKEND=numpy python benchmarks/launch_cost.py     # the NumPy references: nothing is launched
    NBCOLL_BACKEND=sim python benchmarks/launch_cost.py --count 2 --rounds 1 --large 1024   # proves it runs

Writes ``launch_cost_<backend>.json`` and ``.txt`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from report import environment, write_json, write_table

import nbcoll
from nbcoll.kernels.copy import copy, copy_chunk, copy_kernel

HERE = Path(__file__).resolve().parent


def per_call_us(fn: Callable[[], object], count: int) -> float:
    """Microseconds a call of ``fn``, over ``count`` calls and the synchronize that ends them."""
    start = time.perf_counter()
    for _ in range(count):
        fn()
    nbcoll.synchronize()
    return (time.perf_counter() - start) / count * 1e6


def pieces(backend: str, large: int) -> dict[str, Callable[[], object]]:
    small = nbcoll.to_device(np.arange(2, dtype=np.float32))
    small_out = nbcoll.zeros(2, dtype=np.float32)
    big = nbcoll.to_device(np.ones(large // 4, dtype=np.float32))
    big_out = nbcoll.zeros(large // 4, dtype=np.float32)
    rows: dict[str, Callable[[], object]] = {}
    if backend != "numpy":  # the platform's floor: nbcoll's kernel with none of its dispatch, views or grid sizing
        rows["raw launch, 8 B (numba-cuda)"] = lambda: copy_kernel[1, 32](small_out, small)
    rows["copy_chunk, 8 B"] = lambda: copy_chunk(small_out, small)
    rows["copy, 8 B (checked entry)"] = lambda: copy(small_out, small)
    rows["slice x[0:1]"] = lambda: small[0:1]
    rows["synchronize"] = nbcoll.synchronize
    rows["to_host, 8 B"] = lambda: nbcoll.to_host(small)
    rows[f"copy_chunk + synchronize, {large} B"] = lambda: (copy_chunk(big_out, big), nbcoll.synchronize())
    return rows


def measure(rows: dict[str, Callable[[], object]], count: int, rounds: int) -> dict[str, float]:
    names = list(rows)
    for fn in rows.values():  # compile and warm up outside the timing
        fn()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(per_call_us(rows[name], count))
    return {name: statistics.median(values) for name, values in samples.items()}


def table(figures: dict[str, float], env: dict[str, str], command: str) -> str:
    lines = [
        f"# launch_cost: {env['backend']} backend, {env['date']} on {env['host']} ({env['machine']})",
        f"# command: {command}",
        f"# {'piece':<44} {'us a call':>10}",
    ]
    lines += [f"  {name:<44} {us:>10.1f}" for name, us in figures.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="calls a round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; each figure is their median (default 5)")
    parser.add_argument("--large", type=int, default=16 << 20, help="bytes of the large copy (default 16 MiB)")
    parser.add_argument("--out", default=str(HERE / "results"), help="where the .json and .txt go")
    args = parser.parse_args(argv)
    for name in ("count", "rounds", "large"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    backend = nbcoll.get_backend()
    figures = measure(pieces(backend, args.large - args.large % 4 or 4), args.count, args.rounds)
    env = environment()
    command = "python benchmarks/launch_cost.py " + " ".join(argv)
    text = table(figures, env, command.strip())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_table(out, f"launch_cost_{backend}.txt", text)
    write_json(
        out / f"launch_cost_{backend}.json",
        {"environment": env, "count": args.count, "rounds": args.rounds, "us_a_call": figures},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
