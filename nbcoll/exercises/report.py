"""What a check prints: one line per case, then the first failure with its input, expected and actual output.

Example::

    report = Report("map_kernel")
    report.add("n=0", ok=True)
    report.add("n=33", ok=False, detail="out[32] expected 1.0, got 0.0", picture=thread_picture(...))
    print(report.format())
    report.passed                       # False
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
    (:mod:`nbcoll.exercises.supervised`) times each case by them.
    """

    exercise: str
    cases: list[Case] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    listener: Callable[[str, Any], None] | None = field(default=None, repr=False, compare=False)

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

    def format(self) -> str:
        lines = [f"exercise {self.exercise}:"]
        lines += [f"  {'PASS' if case.ok else 'FAIL'}  {case.name}" for case in self.cases]
        failure = self.first_failure
        if failure is not None:
            lines += ["", f"first failing case: {failure.name}"]
            lines += ["  " + line for line in failure.detail.splitlines()]
            if failure.picture:
                lines += ["", *("  " + line for line in failure.picture.splitlines())]
        lines += [""] + self.notes if self.notes else []
        passed = sum(case.ok for case in self.cases)
        verdict = "all cases pass" if self.passed else f"{passed} of {len(self.cases)} cases pass"
        lines += ["", f"{self.exercise}: {verdict}"]
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The report as JSON-ready data (what a child process sends back); ``Report.from_json`` reads it."""
        return {"exercise": self.exercise, "cases": [asdict(case) for case in self.cases], "notes": self.notes}

    @classmethod
    def from_json(cls, data: dict) -> Report:
        return cls(data["exercise"], [Case(**case) for case in data["cases"]], list(data["notes"]))


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


def thread_picture_1d(wrong: np.ndarray, threads: int, owner: Callable[[int], int] | None = None) -> str:
    """One row per block, one character per thread: ``X`` where that thread's element is wrong, ``.`` where right.

    ``owner(i)`` is the global thread index that should write element ``i`` (``i`` itself by default).
    """
    owner = owner or (lambda i: i)
    total = max((owner(i) for i in range(wrong.size)), default=-1) + 1
    marks = ["."] * max(total, threads)
    for i in np.flatnonzero(wrong):
        marks[owner(int(i))] = "X"
    for i in range(total, len(marks)):
        marks[i] = " "  # threads with no element: idle by design
    lines = [f"threads that own a wrong element (X) or a right one (.), {threads} per block:"]
    for block in range(0, len(marks), threads):
        lines.append(f"  block {block // threads:3d} | {''.join(marks[block : block + threads])}".rstrip())
    return "\n".join(lines)


def thread_picture_2d(wrong: np.ndarray, block: tuple[int, int], limit: int = 24) -> str:
    """The output grid, one character per element (``X`` wrong), with block boundaries as ``|`` and ``-`` lines.

    Element ``[row, col]`` belongs to the thread ``threadIdx = (col % bx, row % by)`` of the block
    ``blockIdx = (col // bx, row // by)``: ``x`` runs along columns, as in ``cuda.grid(2)`` read as ``col, row``.
    """
    by, bx = block
    rows, cols = min(wrong.shape[0], limit), min(wrong.shape[1], limit)
    lines = [f"output elements, X where wrong ({by} x {bx} threads per block, blockIdx.x along columns):"]
    for r in range(rows):
        if r and r % by == 0:
            lines.append("  " + "+".join("-" * min(bx, cols - c) for c in range(0, cols, bx)))
        row = "|".join(
            "".join("X" if wrong[r, c] else "." for c in range(c0, min(c0 + bx, cols))) for c0 in range(0, cols, bx)
        )
        lines.append("  " + row)
    if wrong.shape[0] > rows or wrong.shape[1] > cols:
        lines.append(f"  (first {rows} x {cols} of {wrong.shape[0]} x {wrong.shape[1]})")
    return "\n".join(lines)
