"""``--plot out.png``: bus bandwidth against size, one line per algorithm (matplotlib, imported only here).

Example::

    draw(rows, "all_reduce.png", title="all_reduce, 4 ranks, numpy backend")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nbcoll.perf.table import Row


def draw(rows: Sequence[Row], path: str | Path, title: str = "") -> Path:
    """Out-of-place busbw (GB/s) against size (bytes, log scale); one line per algorithm, type and op."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib (pip install matplotlib)") from exc
    lines: dict[str, list[tuple[int, float]]] = {}
    several_types = len({(r.dtype, r.redop) for r in rows}) > 1
    for r in rows:
        label = f"{r.algo} {r.dtype} {r.redop}" if several_types else r.algo
        if r.nbytes > 0:
            lines.setdefault(label, []).append((r.nbytes, r.out_of_place.busbw))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in lines.items():
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
