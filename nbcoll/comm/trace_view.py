"""Draw a trace as a space-time diagram: one row per rank, one box per step, one arrow per chunk that moved.

Chunks on a connection arrive in the order they were sent (it is a FIFO), so the ``k``-th chunk rank ``a`` sent
to rank ``b`` on channel ``c`` is the ``k``-th chunk ``b`` received from ``a`` on that channel: that pairing gives
every arrow. When a collective ran on several channels, each box names its channel (``ch 1``) and is outlined in
the channel's colour. The x axis is
each rank's step number by default (the algorithm's structure, the same on every run) or wall-clock time with
``--time`` (where the time really went).

A collective run as one kernel per rank (``proto="device"``) is one hatched box per rank, labelled ``device
kernel`` with each channel's step count (and the error, if it failed): its chunks move inside the kernel, so no
arrow is drawn; with ``--time`` the box spans the launch to the return.

Example::

    python -m nbcoll trace view traces/ -o ring.png --seq 1
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from nbcoll.comm.trace import DEVICE_KERNEL, load

COLOURS = {
    "send": "#4c72b0",
    "recv": "#55a868",
    "recv_reduce_send": "#c44e52",
    "recv_copy_send": "#8172b2",
    "recv_reduce_copy": "#ccb974",
    "recv_reduce_copy_send": "#dd8452",
    "copy_send": "#64b5cd",
    "direct_send": "#4c72b0",
    "direct_recv": "#55a868",
    "direct_recv_reduce_copy": "#ccb974",
    "copy": "#999999",
    "post_op": "#999999",
    DEVICE_KERNEL: "#e0d9a8",
}

LEGEND_NAMES = {DEVICE_KERNEL: "device kernel"}
"""The legend's name of a primitive, where it is not the primitive's own."""

CHANNEL_EDGES = ("#000000", "#e377c2", "#17becf", "#bcbd22")
"""Outline of a step's box by its channel, when a trace holds several."""


def select(records: list[dict], seq: int | None) -> list[dict]:
    """The records of collective number ``seq`` (every collective when ``None``).

    An unknown ``seq`` raises ``LookupError`` naming the collectives the trace does hold.
    """
    chosen = [rec for rec in records if seq is None or rec["seq"] == seq]
    if not chosen:
        held = sorted({(rec["seq"], rec["collective"]) for rec in records})
        listing = ", ".join(f"{s} ({name})" for s, name in held)
        raise LookupError(f"--seq: no collective #{seq} in the trace; it holds {listing}")
    return chosen


def _in_rank_order(records: list[dict]) -> list[dict]:
    # A rank runs its steps one after the other, so its clock orders them, across collectives too.
    return sorted(records, key=lambda r: (r["rank"], r["t0"], r["seq"], r["step"]))


def channel_of(rec: dict) -> int:
    """The channel a step ran on (traces written before channels existed ran everything on channel 0)."""
    return rec.get("channel", 0)


def arrows(records: list[dict]) -> list[tuple[dict, dict]]:
    """(sending step, receiving step) for every chunk, matched in FIFO order per connection (and channel)."""
    sent: dict[tuple[int, int, int], list[dict]] = defaultdict(list)
    received: dict[tuple[int, int, int], list[dict]] = defaultdict(list)
    for rec in _in_rank_order(records):
        for peer in rec["send"]:
            sent[(rec["rank"], peer, channel_of(rec))].append(rec)
        for peer in rec["recv"]:
            received[(peer, rec["rank"], channel_of(rec))].append(rec)
    return [pair for key in sent for pair in zip(sent[key], received.get(key, []), strict=False)]


def columns(records: list[dict]) -> dict[int, int]:
    """``id(record) -> column``: the earliest column each step can occupy.

    ``for each step: column = max(column of the rank's previous step + 1, column of every step that sent it
    data + 1)``. A step then never sits left of the step it waits for, so every arrow points forward, whatever
    the ranks' own step counts or clocks say.
    """
    incoming: dict[int, list[dict]] = defaultdict(list)
    for src, dst in arrows(records):
        incoming[id(dst)].append(src)
    by_rank: dict[int, list[dict]] = defaultdict(list)
    for rec in _in_rank_order(records):
        by_rank[rec["rank"]].append(rec)
    column = {id(rec): 0 for rec in records}
    for _ in range(len(records) + 1):  # longest-path relaxation; a trace is acyclic, so this settles
        changed = False
        for steps in by_rank.values():
            previous = -1
            for rec in steps:
                want = max([previous + 1] + [column[id(src)] + 1 for src in incoming[id(rec)]])
                if want > column[id(rec)]:
                    column[id(rec)], changed = want, True
                previous = column[id(rec)]
        if not changed:
            break
    return column


def _label(name: str, width: int = 12) -> str:
    """``recv_reduce_copy_send`` as ``recv_reduce\ncopy_send``: lines short enough to fit a box."""
    lines: list[str] = []
    for word in name.split("_"):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += "_" + word
        else:
            lines.append(word)
    return "\n".join(lines)


def box_text(rec: dict, several_channels: bool) -> str:
    """What a step's box says: its primitive, channel and element span; for a whole kernel launch, ``device
    kernel``, each channel's steps, and the error's name when it failed.

    >>> box_text({"primitive": "recv_reduce_send", "span": [8, 12], "channel": 1}, several_channels=True)
    'recv_reduce\\nsend\\nch 1 [8:12)'
    >>> box_text({"primitive": "device_kernel", "status": [[0, 6], [0, 6]], "outcome": "ok"}, False)
    'device kernel\\nsteps 6, 6'
    """
    if rec["primitive"] == DEVICE_KERNEL:
        steps = ", ".join(str(step) for _, step in rec.get("status", []))
        outcome = rec.get("outcome", "ok")
        return "device kernel" + (f"\nsteps {steps}" if steps else "") + (f"\n{outcome}" if outcome != "ok" else "")
    span = f"[{rec['span'][0]}:{rec['span'][1]})" if rec["span"] else ""
    channel = f"ch {channel_of(rec)} " if several_channels else ""
    return f"{_label(rec['primitive'])}\n{channel}{span}"


def draw(directory: str | Path, output: str | Path, seq: int | None = None, use_time: bool = False) -> Path:
    """Render the trace in ``directory`` to the image file ``output``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    records = select(load(directory), seq)
    ranks = sorted({rec["rank"] for rec in records})
    start = min(rec["t0"] for rec in records)
    column = columns(records)

    def x_range(rec: dict) -> tuple[float, float]:
        if use_time:
            return (rec["t0"] - start) * 1e3, (rec["t1"] - start) * 1e3
        x = column[id(rec)]
        return x + 0.05, x + 0.95

    width = max(x_range(rec)[1] for rec in records)
    fig, ax = plt.subplots(figsize=(max(6.0, min(40.0, 1.1 * width + 2)), 1.4 + 0.9 * len(ranks)))
    if not use_time and len({rec["seq"] for rec in records}) > 1:
        _shade_collectives(ax, records, column)
    several_channels = len({channel_of(rec) for rec in records}) > 1
    for rec in records:
        x0, x1 = x_range(rec)
        y = rec["rank"]
        fill = COLOURS.get(rec["primitive"], "grey")
        edge = CHANNEL_EDGES[channel_of(rec) % len(CHANNEL_EDGES)] if several_channels else fill
        kernel = rec["primitive"] == DEVICE_KERNEL  # a whole launch: hatched, outlined red if it failed
        if kernel:
            edge = "#000000" if rec.get("outcome", "ok") == "ok" else "#d62728"
        box = plt.Rectangle((x0, y - 0.3), max(x1 - x0, 1e-3), 0.6, facecolor=fill, edgecolor=edge, lw=1.5)
        if kernel:
            box.set_hatch("//")
        ax.add_patch(box)
        if not use_time:
            backing = {"facecolor": "white", "alpha": 0.8, "lw": 0} if kernel else None  # legible over the hatch
            ax.text((x0 + x1) / 2, y, box_text(rec, several_channels), ha="center", va="center", fontsize=5.5,
                    bbox=backing)  # fmt: skip
    for src, dst in arrows(records):
        sx1, dx0 = x_range(src)[1], x_range(dst)[0]
        ax.annotate(
            "",
            xy=(dx0, dst["rank"]),
            xytext=(sx1, src["rank"]),
            arrowprops={"arrowstyle": "->", "color": "black", "alpha": 0.5, "lw": 0.8},
        )
    used = sorted({rec["primitive"] for rec in records})
    handles = [Patch(facecolor=COLOURS.get(name, "grey"), hatch="//" if name == DEVICE_KERNEL else None,
                     label=LEGEND_NAMES.get(name, name)) for name in used]  # fmt: skip
    if several_channels:
        handles += [
            Patch(facecolor="white", edgecolor=CHANNEL_EDGES[c % len(CHANNEL_EDGES)], lw=1.5, label=f"channel {c}")
            for c in sorted({channel_of(rec) for rec in records})
        ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(4, len(handles)), fontsize=7)
    names = {}
    for rec in records:
        device = ", device" if rec.get("proto") == "device" else ""
        names[rec["seq"]] = f"#{rec['seq']} {rec['collective']} ({rec['algo']}{device})"
    ax.set_title(", ".join(names[s] for s in sorted(names)) + f" on {len(ranks)} ranks")
    ax.set_xlim(0, width + 0.2)
    ax.set_ylim(max(ranks) + 0.7, min(ranks) - 0.7)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("time (ms)" if use_time else "step (a step starts after the steps it waits for)")
    fig.tight_layout()
    output = Path(output)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return output


def _shade_collectives(ax: Any, records: list[dict], column: dict[int, int]) -> None:
    """A faint band behind each collective's steps on each rank, labelled ``#seq``, so several read apart."""
    from matplotlib.patches import Rectangle

    spans: dict[tuple[int, int], list[int]] = defaultdict(list)
    for rec in records:
        spans[(rec["rank"], rec["seq"])].append(column[id(rec)])
    for (rank, seq), cols in spans.items():
        lo, hi = min(cols), max(cols) + 1
        shade = "#e8e8e8" if seq % 2 else "#f4f4f4"
        ax.add_patch(Rectangle((lo, rank - 0.42), hi - lo, 0.84, color=shade, zorder=0))
        ax.text(lo + 0.05, rank - 0.36, f"#{seq}", fontsize=5, va="top", color="#555555")
