"""Exercises: the learner writes a kernel or an algorithm, and nbcoll's own checks say whether it is right.

Example::

    python -m nbcoll exercise                          # the list
    python -m nbcoll exercise map_kernel               # copies map_kernel.py here, to fill in
    python -m nbcoll exercise map_kernel --check map_kernel.py
    python -m nbcoll exercise map_kernel --solution    # the reference solution

From Python::

    from nbcoll import exercises
    report = exercises.check("map_kernel", "map_kernel.py")
    print(report.format())

Each exercise is a starter file (docstring, signature, a plan in comments, no body) and a reference solution,
both kept as files under ``starters/`` and ``solutions/`` (not modules of the package, so their kernels are not
part of nbcoll's kernel registry), and a check in one of the checker modules: kernels run on the simulator
(``kernel_checks``, ``block_checks``), NumPy functions in-process (``function_checks``), algorithms on 2, 3
and 4 ranks that are threads of one process (:mod:`nbcoll.comm.loopback`, ``algorithm_checks``).
"""

from __future__ import annotations

from pathlib import Path

from nbcoll.backend import device_backend

# The package's names, defined in its modules (re-exported: ``exercises.get``, ``exercises.EXERCISES``, ...).
from nbcoll.exercises.catalog import EXERCISES as EXERCISES
from nbcoll.exercises.catalog import HERE as HERE
from nbcoll.exercises.catalog import PTX_CASE as PTX_CASE
from nbcoll.exercises.catalog import Exercise as Exercise
from nbcoll.exercises.catalog import copy_starter as copy_starter
from nbcoll.exercises.catalog import get as get
from nbcoll.exercises.catalog import learner_file as learner_file
from nbcoll.exercises.catalog import load_learner as load_learner
from nbcoll.exercises.report import Report
from nbcoll.exercises.running import learner_entry as learner_entry
from nbcoll.exercises.running import run_checks


def check(
    name: str, path: str | Path, ptx: bool = True, trace_dir: str | Path | None = None, timeout: float | None = None
) -> Report:
    """Run the checks of exercise ``name`` on the learner's file ``path`` and return the report.

    ``ptx``: also compile a kernel that passes on the simulator to PTX for sm_90 (in a subprocess).
    ``trace_dir``: where an algorithm exercise writes the trace diagrams of the learner's run and the reference's.
    ``timeout``: run the checks in a child process (:mod:`nbcoll.exercises.supervised`) in which the import of
    the file and every case have ``timeout`` seconds; a case that runs longer, or during which the file ends
    the process, fails. ``None`` (the default) runs them in this process; ``--check`` gives each case 60 s.

    Kernels run on the simulator: in this process when its device backend is ``sim``, else in a child process.
    """
    exercise = get(name)
    # A child process bounds each case; on a GPU machine, it also runs kernels on the simulator the checks describe.
    if timeout is not None or (exercise.kind == "kernel" and device_backend() != "sim"):
        from nbcoll.exercises import supervised

        return supervised.run(name, path, ptx, trace_dir, supervised.CASE_SECONDS if timeout is None else timeout)
    return run_checks(Report(name), exercise, path, ptx, trace_dir)
