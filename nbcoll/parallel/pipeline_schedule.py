"""Pipeline schedules as lists of actions, the timeline they produce, its bubble, and a picture of it.

A stage runs ``("F", i)`` (forward of micro-batch ``i``) and ``("B", i)`` (its backward) in a fixed order. Two
orders, for ``p`` stages and ``m`` micro-batches:

    gpipe   F0 F1 .. F(m-1)  B0 B1 .. B(m-1)                  every stage keeps all m activations
    1f1b    F0 .. F(w-1), then (F, B) pairs, then the last Bs   w = p - 1 - stage: at most p in flight

The timeline places every action at the earliest time its stage is free and its input exists: ``F(s, i)``
after ``F(s - 1, i)``, ``B(s, i)`` after ``B(s + 1, i)``. With one time unit per forward and per backward,
both schedules take ``2 (m + p - 1)`` units of which each stage is busy ``2 m``, so the idle share (the bubble)
is ``(p - 1) / (m + p - 1)``. 1F1B buys its lower memory with no extra time.

Example::

    actions = [schedule_actions("1f1b", 4, stage, 8) for stage in range(4)]
    cells = timeline(actions)                    # cells[stage] = [(start, "F", 0), (start, "F", 1), ...]
    bubble_fraction(cells)                       # 3 / 11
    draw_timeline(cells, "1f1b.png")
"""

from __future__ import annotations

import os
from collections.abc import Sequence

SCHEDULES = ("gpipe", "1f1b")

Action = tuple[str, int]
"""``("F", micro_batch)`` or ``("B", micro_batch)``."""

Cell = tuple[int, str, int]
"""``(start time, "F" or "B", micro_batch)``: one action placed on the timeline."""


def schedule_actions(schedule: str, stages: int, stage: int, chunks: int) -> list[Action]:
    """The order in which ``stage`` (of ``stages``) runs the forwards and backwards of ``chunks`` micro-batches."""
    if schedule == "gpipe":
        return [("F", i) for i in range(chunks)] + [("B", i) for i in range(chunks)]
    if schedule == "1f1b":
        warmup = min(stages - 1 - stage, chunks)  # forwards in flight before the first backward reaches here
        actions = [("F", i) for i in range(warmup)]
        for i in range(warmup, chunks):
            actions += [("F", i), ("B", i - warmup)]
        return actions + [("B", i) for i in range(chunks - warmup, chunks)]
    raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")


def peak_in_flight(actions: Sequence[Action]) -> int:
    """The most micro-batches whose forward has run and backward has not: the activations a stage holds at once."""
    held = peak = 0
    for kind, _ in actions:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def timeline(actions: Sequence[Sequence[Action]], forward_time: int = 1, backward_time: int = 1) -> list[list[Cell]]:
    """Place each stage's actions in time: each starts when its stage is free and its input has arrived."""
    stages = len(actions)
    done: dict[tuple[int, str, int], int] = {}  # (stage, kind, micro-batch) -> end time
    cells: list[list[Cell]] = [[] for _ in range(stages)]
    free = [0] * stages
    position = [0] * stages
    while any(position[s] < len(actions[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if position[s] == len(actions[s]):
                continue
            kind, i = actions[s][position[s]]
            if kind == "F":
                needs = (s - 1, "F", i) if s > 0 else None
            else:
                needs = (s + 1, "B", i) if s < stages - 1 else (s, "F", i)
            if needs is not None and needs not in done:
                continue
            start = max(free[s], done[needs] if needs else 0)
            free[s] = done[(s, kind, i)] = start + (forward_time if kind == "F" else backward_time)
            cells[s].append((start, kind, i))
            position[s] += 1
            progressed = True
        if not progressed:
            raise ValueError("actions: the stages' orders wait on each other forever (no action can start)")
    return cells


def makespan(cells: Sequence[Sequence[Cell]], forward_time: int = 1, backward_time: int = 1) -> int:
    return max(start + (forward_time if kind == "F" else backward_time) for row in cells for start, kind, _ in row)


def bubble_fraction(cells: Sequence[Sequence[Cell]], forward_time: int = 1, backward_time: int = 1) -> float:
    """Idle (stage x time) area over the whole area, counted from the placed cells."""
    total = makespan(cells, forward_time, backward_time) * len(cells)
    busy = sum(forward_time if kind == "F" else backward_time for row in cells for _, kind, _ in row)
    return 1 - busy / total


def draw_timeline(cells: Sequence[Sequence[Cell]], path: str | os.PathLike, title: str = "") -> str:
    """A PNG of the timeline: one row per stage, forward cells blue, backward green, each numbered; the gaps are
    the bubble. Returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = makespan(cells)
    figure, axes = plt.subplots(figsize=(max(6, end * 0.35), 0.5 * len(cells) + 1), dpi=100)
    try:
        for stage, row in enumerate(cells):
            for start, kind, i in row:
                color = "#4c72b0" if kind == "F" else "#55a868"
                axes.broken_barh([(start, 1)], (stage - 0.4, 0.8), facecolors=color, edgecolors="white")
                axes.text(start + 0.5, stage, f"{kind}{i}", ha="center", va="center", color="white", fontsize=7)
        axes.set_xlim(0, end)
        axes.set_ylim(len(cells) - 0.5, -0.5)
        axes.set_yticks(range(len(cells)), [f"stage {s}" for s in range(len(cells))])
        axes.set_xlabel(f"time (one unit per forward or backward); bubble {bubble_fraction(cells):.0%}")
        if title:
            axes.set_title(title)
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)
    return str(path)


__all__ = [
    "SCHEDULES",
    "bubble_fraction",
    "draw_timeline",
    "makespan",
    "peak_in_flight",
    "schedule_actions",
    "timeline",
]
