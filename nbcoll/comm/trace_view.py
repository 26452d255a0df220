"""Draw a trace as a space-time diagram: one row per rank, one box per step, one arrow per chunk that moved.

Chunks on a connection arrive in the order they were sent (it is a FIFO), so the ``k``-th chunk rank ``a`` sent
to rank ``b`` is the ``k``-th chunk ``b`` received from ``a``: that pairing gives every arrow. The x axis is
each rank's step number by default (the algorithm's structure, the same on every run) or wall-clock time with
``--time`` (where the time really went).

Example::

    python -m nbcoll trace view traces/ -o ring.png --seq 1
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from nbcoll.comm.trace import load

COLOURS = {
    "send": "#4c72b0",
    "recv": "#55a868",
    "recv_reduce_send": "#c44e52",
    "recv_copy_send": "#8172b2",
    "recv_reduce_copy": "#ccb974",
    "recv_reduce_copy_send": "#dd8452",
    "copy_send": "#64b5cd",
    "direct_post": "#4c72b0",
    "direct_recv": "#55a868",
    "direct_recv_reduce_copy": "#ccb974",
    "copy": "#999999",
    "post_op": "#999999",
}


def select(records: list[dict], seq: int | None) -> list[dict]:
    """The records of collective number ``seq`` (every collective when ``None``)."""
    chosen = [rec for rec in records if seq is None or rec["seq"] == seq]
    if not chosen:
        raise ValueError(f"seq: no collective #{seq} in the trace")
    return chosen


def arrows(records: list[dict]) -> list[tuple[dict, dict]]:
    """(sending step, receiving step) for every chunk, matched in FIFO order per connection."""
    sent: dict[tuple[int, int], list[dict]] = defaultdict(list)
    received: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: (r["rank"], r["seq"], r["step"])):
        for peer in rec["send"]:
            sent[(rec["rank"], peer)].append(rec)
        for peer in rec["recv"]:
            received[(peer, rec["rank"])].append(rec)
    return [pair for key in sent for pair in zip(sent[key], received.get(key, []), strict=False)]


def draw(directory: str | Path, output: str | Path, seq: int | None = None, use_time: bool = False) -> Path:
    """Render the trace in ``directory`` to the image file ``output``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = select(load(directory), seq)
    ranks = sorted({rec["rank"] for rec in records})
    start = min(rec["t0"] for rec in records)
    first_step = {r: min(rec["step"] for rec in records if rec["rank"] == r) for r in ranks}

    def x_range(rec: dict) -> tuple[float, float]:
        if use_time:
            return (rec["t0"] - start) * 1e3, (rec["t1"] - start) * 1e3
        x = rec["step"] - first_step[rec["rank"]]
        return x + 0.1, x + 0.9

    width = max(x_range(rec)[1] for rec in records)
    fig, ax = plt.subplots(figsize=(max(6.0, min(24.0, 0.9 * width + 2)), 1.0 + 0.8 * len(ranks)))
    for rec in records:
        x0, x1 = x_range(rec)
        y = rec["rank"]
        ax.add_patch(plt.Rectangle((x0, y - 0.3), max(x1 - x0, 1e-3), 0.6, color=COLOURS.get(rec["primitive"], "grey")))
        if not use_time:
            span = f"[{rec['span'][0]}:{rec['span'][1]})" if rec["span"] else ""
            ax.text((x0 + x1) / 2, y, f"{rec['primitive']}\n{span}", ha="center", va="center", fontsize=6)
    for src, dst in arrows(records):
        sx1, dx0 = x_range(src)[1], x_range(dst)[0]
        ax.annotate(
            "",
            xy=(dx0, dst["rank"]),
            xytext=(sx1, src["rank"]),
            arrowprops={"arrowstyle": "->", "color": "black", "alpha": 0.5, "lw": 0.8},
        )
    names = sorted({f"{rec['collective']} ({rec['algo']})" for rec in records})
    ax.set_title(", ".join(names) + f" on {len(ranks)} ranks")
    ax.set_xlim(0, width + 0.2)
    ax.set_ylim(max(ranks) + 0.7, min(ranks) - 0.7)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_xlabel("time (ms)" if use_time else "step")
    fig.tight_layout()
    output = Path(output)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return output
