"""What a check prints: one line per case, then the first failure with its input, expected and actual output.

Example::

    report = Report("map_kernel")
    report.plan(["n=0", "n=33", "n=70"])   # every case the check has: "k of N cases pass" counts them all
    report.add("n=0", ok=True)
    report.add("n=33", ok=False, detail="out[32] expected 1.0, got 0.0", picture=thread_picture(...))
    print(report.format())               # n=70 is listed as not run: the check stops at the first failure
    report.passed                        # False
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class Case:
    """One case of a check: its name, whether it passed, and, when it failed, what to show the learner."""

    name: str
    ok: bool
    detail: str = ""
    picture: str = ""


@dataclass
class Report:
    """The result of checking one exercise; :meth:`format` is what ``--check`` prints.

    ``listener(event, what)``, if given, hears ``("begin", name)`` as the learner's code starts to run for a
    case (or ``"import"``) and ``("case", case)`` as each case is recorded: a process that watches the check
    (:mod:`nbcoll.exercises.supervised`) times each case by them, and hears ``("plan", (names, final))`` too.

    ``planned`` names every case the check has, in order (:meth:`plan`), ``final`` those that come after all of
    them (the PTX compile). A check stops at its first failing case, so the cases after it did not run: the
    report lists them as such, and its count, "k of N cases pass", is over all N.
    """

    exercise: str
    cases: list[Case] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    listener: Callable[[str, Any], None] | None = field(default=None, repr=False, compare=False)
    planned: list[str] = field(default_factory=list)
    final: list[str] = field(default_factory=list)

    def plan(self, names: list[str], final: bool = False) -> None:
        """Name the cases the check will run (adding to those already planned), before the first one runs;
        ``final``: cases that run after every other, whenever these are planned."""
        known = self.planned + self.final
        (self.final if final else self.planned).extend(name for name in names if name not in known)
        if self.listener is not None:
            self.listener("plan", (list(names), final))

    def begin(self, name: str) -> None:
        """Say that the learner's code starts to run for case ``name``."""
        if self.listener is not None:
            self.listener("begin", name)

    def add(self, name: str, ok: bool, detail: str = "", picture: str = "") -> Case:
        case = Case(name, ok, detail, picture)
        self.cases.append(case)
        if self.listener is not None:
            self.listener("case", case)
        return case

    def fail(self, name: str, detail: str) -> Case:
        return self.add(name, False, detail)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(case.ok for case in self.cases)

    @property
    def first_failure(self) -> Case | None:
        return next((case for case in self.cases if not case.ok), None)

    @property
    def not_run(self) -> list[str]:
        """The planned cases that did not run (those after the first failing case)."""
        ran = {case.name for case in self.cases}
        return [name for name in self.planned + self.final if name not in ran]

    def format(self) -> str:
        lines = [f"exercise {self.exercise}:"]
        lines += [f"  {'PASS' if case.ok else 'FAIL'}  {case.name}" for case in self.cases]
        not_run = self.not_run
        lines += [f"  ----  {name}   (not run)" for name in not_run]
        failure = self.first_failure
        if failure is not None:
            lines += ["", f"first failing case: {failure.name}"]
            lines += ["  " + line for line in failure.detail.splitlines()]
            if failure.picture:
                lines += ["", *("  " + line for line in failure.picture.splitlines())]
        lines += [""] + self.notes if self.notes else []
        lines += ["", f"{self.exercise}: {self.verdict()}"]
        return "\n".join(lines)

    def verdict(self) -> str:
        """The last line's count: ``"1 of 4 cases pass (2 not run: ...)"``, over every case the check has."""
        if self.passed and not self.not_run:
            return "all cases pass"
        failure = self.first_failure
        if failure is not None and failure.name == "import":
            return "the file did not load, so none of its cases ran"
        passed, total, not_run = sum(case.ok for case in self.cases), len(self.cases) + len(self.not_run), self.not_run
        after = f" ({len(not_run)} not run: the check stops at the first failing case)" if not_run else ""
        return f"{passed} of {total} case{'s' if total != 1 else ''} pass{'es' if total == 1 else ''}{after}"

    def to_json(self) -> dict:
        """The report as JSON-ready data (what a child process sends back); ``Report.from_json`` reads it."""
        cases = [asdict(case) for case in self.cases]
        planned = {"planned": self.planned, "final": self.final}
        return {"exercise": self.exercise, "cases": cases, "notes": self.notes, **planned}

    @classmethod
    def from_json(cls, data: dict) -> Report:
        cases = [Case(**case) for case in data["cases"]]
        planned = {"planned": list(data.get("planned", [])), "final": list(data.get("final", []))}
        return cls(data["exercise"], cases, list(data["notes"]), **planned)


def exit_text(exc: SystemExit) -> str:
    """How the learner's code ended the process: ``"sys.exit(0) (or raise SystemExit)"``."""
    return f"sys.exit({'' if exc.code is None else repr(exc.code)}) (or raise SystemExit)"


def first_difference(expected: np.ndarray, actual: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> str:
    """A sentence naming the first element where ``actual`` differs from ``expected`` (and how many differ)."""
    if expected.shape != actual.shape:
        return f"shape: expected {expected.shape}, got {actual.shape}"
    wrong = wrong_mask(expected, actual, rtol, atol)
    if not wrong.any():
        return ""
    index = tuple(int(i) for i in np.argwhere(wrong)[0])
    where = index[0] if len(index) == 1 else index
    return (
        f"{int(wrong.sum())} of {wrong.size} elements wrong; first at [{where}]: "
        f"expected {_value(expected[index])}, got {_value(actual[index])}"
    )


def _value(v: object) -> str:
    return f"{float(v):.6g}" if np.asarray(v).dtype.kind == "f" else str(v)


def wrong_mask(expected: np.ndarray, actual: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> np.ndarray:
    if expected.dtype.kind in "fc":
        return ~np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=False)
    return actual != expected


def show(array: np.ndarray, limit: int = 12) -> str:
    """A short text of an input or output array (its shape, and its first elements when it is long)."""
    flat = np.asarray(array).ravel()
    text = np.array2string(flat[:limit], precision=4, separator=", ", max_line_width=110)
    more = f" ... ({flat.size} in all)" if flat.size > limit else ""
    return f"shape {tuple(np.shape(array))}: {text}{more}"


NO_ELEMENT = "-"
"""The mark of a thread that owns no element (past the end of the input, or idle by design)."""


def thread_picture_1d(
    wrong: np.ndarray, threads: int, owner: Callable[[int], int] | None = None, blocks: int | None = None
) -> str:
    """One row per block, one character per thread: ``X`` where that thread's element is wrong, ``.`` where it is
    right, ``-`` where the thread owns no element. Every row is a whole block, ``threads`` characters wide.

    ``owner(i)`` is the global thread index that should write element ``i`` (``i`` itself by default); a thread
    that owns several elements is ``X`` if any of them is wrong. ``blocks``: the blocks launched (by default
    enough for the last owner, and at least one, as a launch on an empty input still runs a block).

    >>> print(thread_picture_1d(np.array([False, False, True]), 4, blocks=2))
    threads per block: 4; X: its element is wrong, .: right, -: owns no element
      block   0 | ..X-
      block   1 | ----
    """
    owner = owner or (lambda i: i)
    total = max((owner(i) for i in range(wrong.size)), default=-1) + 1
    blocks = max(blocks or 0, -(-total // threads), 1)
    marks = [NO_ELEMENT] * (blocks * threads)
    for i in range(wrong.size):
        thread = owner(i)
        marks[thread] = "X" if wrong.flat[i] or marks[thread] == "X" else "."
    lines = [f"threads per block: {threads}; X: its element is wrong, .: right, {NO_ELEMENT}: owns no element"]
    for block in range(blocks):
        lines.append(f"  block {block:3d} | {''.join(marks[block * threads : (block + 1) * threads])}")
    return "\n".join(lines)


def thread_picture_2d(wrong: np.ndarray, block: tuple[int, int], limit: int = 24) -> str:
    """The launched grid, one character per thread (``X`` its element wrong, ``.`` right, ``-`` no element: past
    the edge of the output), with block boundaries as ``|`` and ``=`` lines; every block is drawn whole.

    Element ``[row, col]`` belongs to the thread ``threadIdx = (col % bx, row % by)`` of the block
    ``blockIdx = (col // bx, row // by)``: ``x`` runs along columns, as in ``cuda.grid(2)`` read as ``col, row``.

    >>> print(thread_picture_2d(np.array([[False, True, False]]), (2, 2)))
    threads, one per output element (2 x 2 per block, blockIdx.x along columns); X: wrong, .: right, -: no element
      .X|.-
      --|--
    """
    by, bx = block
    height, width = -(-max(wrong.shape[0], 1) // by) * by, -(-max(wrong.shape[1], 1) // bx) * bx
    rows, cols = min(height, limit), min(width, limit)

    def mark(r: int, c: int) -> str:
        if r >= wrong.shape[0] or c >= wrong.shape[1]:
            return NO_ELEMENT
        return "X" if wrong[r, c] else "."

    lines = [
        f"threads, one per output element ({by} x {bx} per block, blockIdx.x along columns); "
        f"X: wrong, .: right, {NO_ELEMENT}: no element"
    ]
    for r in range(rows):
        if r and r % by == 0:
            lines.append("  " + "+".join("=" * min(bx, cols - c) for c in range(0, cols, bx)))
        row = "|".join("".join(mark(r, c) for c in range(c0, min(c0 + bx, cols))) for c0 in range(0, cols, bx))
        lines.append("  " + row)
    if height > rows or width > cols:
        lines.append(f"  (first {rows} x {cols} threads of the grid's {height} x {width})")
    return "\n".join(lines)
