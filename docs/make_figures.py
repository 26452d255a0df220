"""Regenerate the trace figures of the "Algorithms" page: ``python docs/make_figures.py``.

Runs one small collective per algorithm on 4 ranks, on the numpy backend with ``NBCOLL_TRACE`` on and a FIFO of
8 slots of 32 bytes (8 float32 per chunk), then draws each collective's trace with
:func:`nbcoll.comm.trace_view.draw` into ``docs/_static/trace_<algorithm>.png``. The images are reduced to a small
palette afterwards, so that each stays well under 100 KB.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "_static"
NRANKS = 4

# (figure name, collective, algorithm, elements per rank): one collective each, traced in this order.
FIGURES = [
    ("ring", "all_reduce", "ring", 8),
    ("tree", "all_reduce", "tree", 16),
    ("direct", "all_reduce", "direct", 8),
    ("halving_doubling", "all_reduce", "halving_doubling", 8),
    ("pairwise", "all_to_all", "pairwise", 8),
]


def run_collectives() -> None:
    """On every rank: the collectives of :data:`FIGURES`, in order, each checked against NumPy."""
    import numpy as np

    import nbcoll
    from nbcoll.comm import init

    with init() as comm:
        n = comm.size
        for _, collective, algo, count in FIGURES:
            data = np.arange(count, dtype=np.float32) + comm.rank
            out = nbcoll.zeros(count, np.float32)
            if collective == "all_reduce":
                comm.all_reduce(nbcoll.to_device(data), out, algo=algo)
                expected = n * np.arange(count, dtype=np.float32) + sum(range(n))
            else:
                comm.all_to_all(nbcoll.to_device(data), out, algo=algo)
                block = count // n
                expected = np.concatenate(
                    [data[comm.rank * block : (comm.rank + 1) * block] + p - comm.rank for p in range(n)]
                )
            if not np.array_equal(nbcoll.to_host(out), expected):
                raise AssertionError(f"{collective} ({algo}): wrong result on rank {comm.rank}")


def shrink(png: Path, colours: int = 64) -> None:
    """Re-save ``png`` with a small palette: the diagrams have few colours, and the file gets several times smaller."""
    from PIL import Image

    with Image.open(png) as image:
        reduced = image.convert("RGB").quantize(colors=colours)
    reduced.save(png, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=STATIC, help="folder of the PNG files")
    options = parser.parse_args(argv)

    from nbcoll.comm.trace_view import draw
    from nbcoll.launch import launch

    options.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nbcoll-figures-") as trace_dir:
        env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TRACE": trace_dir, "NBCOLL_BUFFSIZE": "256", "NBCOLL_STEPS": "8"}
        result = launch(NRANKS, function=run_collectives, env=env, timeout=300)
        result.check()
        for seq, (name, *_) in enumerate(FIGURES, start=1):
            png = draw(trace_dir, options.output / f"trace_{name}.png", seq=seq)
            shrink(png)
            print(f"{png}: {png.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    # The ranks import this file by path: keep the repository importable from them, as from here.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
