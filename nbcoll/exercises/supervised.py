"""Run an exercise's check in a child process that this one watches, so that a learner's file that never
finishes, or that ends the process, cannot take the check with it.

The child (``python -m nbcoll.exercises.supervised NAME FILE PTX TRACE_DIR``) runs the checks and writes a line
as the learner's code starts to run for a case (importing the file is the case ``import``), as each case is
recorded, and with the whole report at the end. From the start of a case, the learner's code has ``timeout``
seconds: a case that runs longer is stopped (the child and whatever it started are killed) and fails, "did not
finish within ... s"; a child that ends before its report (the file called ``os._exit``, or crashed the
interpreter) fails the case it was in. Whatever else the child prints (the learner's own ``print``) passes
through. Kernel checks run on the simulator (``NBCOLL_BACKEND=sim``) whatever the backend here, since the checks
describe it::

    report = run("map_kernel", "map_kernel.py", ptx=True, timeout=60.0)
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from nbcoll.exercises import catalog
from nbcoll.exercises.report import Case, Report
from nbcoll.exercises.running import run_checks

CASE_SECONDS = 60.0
"""What a case gets by default: every case of a right solution takes a few seconds at most, even on the
simulator or with the PTX compiler."""

OWN_SECONDS = 300.0
"""What the child may take for nbcoll's own work, where no learner's code runs: starting Python, NumPy and Numba,
drawing trace diagrams."""

MARK = "@nbcoll-check "
"""What starts the child's lines about the check, told apart from the learner's own output."""


def run(
    name: str, path: str | Path, ptx: bool = True, trace_dir: str | Path | None = None, timeout: float = CASE_SECONDS
) -> Report:
    """The report of ``exercises.check(name, path, ptx, trace_dir)``, computed in a child process in which every
    case of the learner's code (and the import of the file) has ``timeout`` seconds."""
    exercise = catalog.get(name)
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"check(timeout): expected seconds > 0, got {timeout!r}")
    catalog.learner_file(path)
    env = dict(os.environ)
    if exercise.kind == "kernel":
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        env["NBCOLL_BACKEND"] = "sim"
    command = [sys.executable, "-m", __name__, name, str(path), str(int(ptx)), str(trace_dir or "")]
    # A session of its own, so that the PTX compiler's process goes with the child when it is killed. Its
    # standard input is a pipe this process never writes to: the child ends when the pipe closes, which it does
    # however this process ends, even killed.
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    child = subprocess.Popen(command, env=env, text=True, start_new_session=True, **pipes)
    try:
        return _watch(child, Report(name), exercise, path, timeout)
    finally:  # however the watch ends (Ctrl-C too)
        _kill(child)
        child.stdin.close()


def _watch(
    child: subprocess.Popen, report: Report, exercise: catalog.Exercise, path: str | Path, timeout: float
) -> Report:
    """Read the child's lines until its report, giving each case ``timeout`` seconds; ``report`` collects the cases
    it finished, for a child stopped or ended before its report."""
    lines: queue.Queue[str | None] = queue.Queue()
    errors: collections.deque[str] = collections.deque(maxlen=20)  # the end of its standard error, passed on
    threading.Thread(target=_read, args=(child.stdout, lines.put), daemon=True).start()
    stderr = threading.Thread(target=_read, args=(child.stderr, lambda line: _pass_on(line, errors)), daemon=True)
    stderr.start()
    running, deadline = None, time.monotonic() + OWN_SECONDS
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            _kill(child)
            return _stopped(report, exercise, path, running, timeout)
        if line is None:
            break
        before, mark, data = line.partition(MARK)
        if before.strip() or not mark:  # the learner's own output, on lines of its own
            sys.stdout.write(before.rstrip("\n") + "\n")
        if not mark:
            continue
        event = json.loads(data)
        if "report" in event:
            return Report.from_json(event["report"])
        if "plan" in event:
            names, final = event["plan"]
            report.plan(names, final)
        elif "begin" in event:
            running, deadline = event["begin"], time.monotonic() + timeout
        else:
            report.cases.append(Case(**event["case"]))
            running, deadline = None, time.monotonic() + OWN_SECONDS
    status = child.wait()
    stderr.join(timeout=5)
    return _ended(report, exercise, path, running, status, "\n".join(errors))


def _read(stream: IO[str], put: Any) -> None:
    for line in stream:
        put(line)
    put(None)


def _pass_on(line: str | None, tail: collections.deque[str]) -> None:
    if line is not None:
        sys.stderr.write(line)
        tail.append(line.rstrip("\n"))


def _kill(child: subprocess.Popen) -> None:
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (AttributeError, ProcessLookupError, PermissionError):  # no process groups here: the child alone
            child.kill()
    child.wait()


def _stopped(
    report: Report, exercise: catalog.Exercise, path: str | Path, running: str | None, timeout: float
) -> Report:
    """The report of a check stopped at its time limit, failing the case that was running."""
    if running == "import":
        report.fail(
            "import",
            f"the check stopped after {timeout:g} s while importing {path}: the code at the top level of the file "
            "did not finish (a loop that never ends?); code that runs at import belongs in a function, or under "
            'if __name__ == "__main__":',
        )
    elif running == catalog.PTX_CASE:
        report.fail(running, f"the PTX compile did not finish within {timeout:g} s (--timeout)")
    elif running is not None:
        report.fail(
            running,
            f"did not finish within {timeout:g} s (--timeout): the {exercise.kind} {exercise.entry} never finished. "
            "A loop whose condition never changes runs forever: a while loop on a value nothing updates, a step of "
            "0, a wait for a message that never comes",
        )
    else:
        report.fail("check", f"the check's own work did not finish within {OWN_SECONDS:g} s")
    return report


def _ended(
    report: Report, exercise: catalog.Exercise, path: str | Path, running: str | None, status: int, errors: str
) -> Report:
    """The report of a child that ended before its report: the case it was in fails."""
    how = f"exit status {status}" if status >= 0 else f"killed by signal {-status}"
    if running == "import":
        report.fail(
            "import",
            f"{path} exited while being imported ({how}): a file that calls os._exit() or sys.exit() at its top "
            'level ends the check; keep such code under if __name__ == "__main__":',
        )
    elif running is not None:
        report.fail(
            running,
            f"the check's process exited during this case ({how}): {exercise.entry} may not end the process "
            "(os._exit(), sys.exit()); it returns when it is done",
        )
    else:
        report.fail("check", f"the check's process ended ({how}) before its report:\n{errors[-2000:]}")
    return report


def _end_with_parent(pipe: int) -> None:
    """End this process and whatever it started once ``pipe``, from the parent, closes: the parent has ended."""
    while os.read(pipe, 1024):
        pass
    with contextlib.suppress(AttributeError, OSError):  # no process groups here: this process alone
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(1)


def main(argv: list[str]) -> None:
    """The child: run the checks here, saying as each case begins and ends, then send the report."""
    name, path, ptx, trace_dir = argv
    pipe = os.dup(0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # a learner's input() reads nothing rather than the parent's pipe
    threading.Thread(target=_end_with_parent, args=(pipe,), daemon=True).start()
    # Its own copy of standard output, so that a learner's file that replaces or closes sys.stdout changes nothing.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    lock = threading.Lock()  # an algorithm's ranks are threads

    def send(event: dict) -> None:
        with lock:
            with contextlib.suppress(Exception):  # the learner's output so far comes first, if it can
                sys.stdout.flush()
            channel.write(MARK + json.dumps(event) + "\n")
            channel.flush()

    def listen(event: str, what: Any) -> None:
        send({"begin": what} if event == "begin" else {"plan": what} if event == "plan" else {"case": asdict(what)})

    report = Report(name, listener=listen)
    run_checks(report, catalog.get(name), path, ptx=bool(int(ptx)), trace_dir=trace_dir or None)
    send({"report": report.to_json()})
    os._exit(0)  # threads a learner's algorithm left running must not keep the process alive


if __name__ == "__main__":
    main(sys.argv[1:])
