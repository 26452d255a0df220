"""Running an exercise's checks in this process: load the learner's file, call its checker, then (for a kernel that
passed) compile it to PTX. :func:`nbcoll.exercises.check` calls this here or in a supervised child process."""

from __future__ import annotations

import importlib
import traceback
from pathlib import Path
from typing import Any

from nbcoll.exercises.catalog import PTX_CASE, Exercise, load_learner
from nbcoll.exercises.report import Report, exit_text


def learner_entry(report: Report, exercise: Exercise, path: str | Path) -> Any:
    """The learner's kernel or function, or ``None`` after recording in ``report`` why it could not be loaded."""
    report.begin("import")
    try:
        module = load_learner(path)
    except FileNotFoundError:
        raise
    except SystemExit as exc:  # the file may not end the check: it fails to load instead
        report.fail(
            "import",
            f"{path} exited while being imported: it called {exit_text(exc)} at its top level, which ends the "
            'check; keep such code under if __name__ == "__main__":',
        )
        return None
    except Exception as exc:  # the learner's file does not import: say where
        mine = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == Path(path).resolve()]
        where = f" (line {mine[-1].lineno})" if mine and not isinstance(exc, SyntaxError) else ""
        report.fail("import", f"{path} does not import: {type(exc).__name__}: {exc}{where}")
        return None
    entry = getattr(module, exercise.entry, None)
    if entry is None:
        report.fail("import", f"{path} defines no {exercise.entry!r}: keep the name the starter gives it")
    return entry


def run_checks(
    report: Report, exercise: Exercise, path: str | Path, ptx: bool = True, trace_dir: str | Path | None = None
) -> Report:
    """The checks of ``exercise`` on ``path``, run in this process and recorded in ``report``."""
    module_name, function = exercise.checker.split(":")
    checker = getattr(importlib.import_module(f"nbcoll.exercises.{module_name}"), function)
    entry = learner_entry(report, exercise, path)
    if entry is None:
        return report
    if exercise.kind == "algorithm":
        checker(report, path, trace_dir)
        return report
    compiles = ptx and exercise.kind == "kernel"
    if compiles:
        report.plan([PTX_CASE], final=True)  # after the simulator's cases, which the checker plans as it starts
    checker(report, entry)
    if compiles and report.passed:
        from nbcoll.exercises import ptx as ptx_check

        report.begin(PTX_CASE)
        for _, ok, message in ptx_check.compile_files([(exercise.name, str(path))]):
            report.add(PTX_CASE, ok, "" if ok else ptx_check.explain(message))
    return report
