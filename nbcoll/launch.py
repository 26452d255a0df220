"""Run a script, a snippet of code or a function on N ranks through ``mpiexec``, and collect each rank's output.

Example::

    from nbcoll.launch import launch
    result = launch(4, "tutorials/08_ring_all_reduce.py")
    print(result.outputs[2])        # everything rank 2 printed, stdout and stderr in order
    result.check()                  # raises LaunchError, showing every rank's output, if a rank failed

A tutorial re-launches itself on 4 ranks when started with plain ``python tutorial.py``::

    import nbcoll.launch
    nbcoll.launch.relaunch(4)       # under mpiexec this returns at once and the script goes on

From a shell: ``python -m nbcoll.launch -n 4 script.py args...``. ``bind_to="core"`` (``--bind-to core``) pins
each rank to a core in turn, with the MPI's own flag; by default the MPI places the ranks.

How the output is collected: every rank runs this module as a small wrapper (``python -m nbcoll.launch --as-rank
...``) that points its own stdout and stderr at a file of its own, records its pid and exit status next to it,
then runs the real target. So the output of each rank stays whole and separate, survives a crash or a kill, and
does not depend on the MPI implementation's output forwarding. ``mpiexec``'s own messages are kept apart.

The wrapper imports the ``nbcoll`` package before the target runs, so the backend is chosen from the environment
the ranks are started with: set ``NBCOLL_BACKEND`` through ``env=``, not from inside the script.

The wrapper is :mod:`nbcoll.launch_rank`; starting and stopping the ``mpiexec`` job, and removing the MPI shared
memory its killed ranks leave behind, is :mod:`nbcoll.launch_job`; what a launch returns is
:mod:`nbcoll.launch_result`.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbcoll.launch_job import BINDINGS, mpiexec_flags, run_job
from nbcoll.launch_rank import run_as_rank
from nbcoll.launch_result import LaunchError as LaunchError  # re-exported: raised by RankResult.check
from nbcoll.launch_result import RankResult

NO_MPI_MESSAGE = "no MPI runtime: install the 'mpi' extra (pip install -e '.[mpi]') or a system MPI"

LAUNCHED_FLAG = "NBCOLL_LAUNCHED"
"""Set to ``1`` in every rank started here, so that :func:`relaunch` knows not to launch again."""

# Their presence means "this process is already a rank of an MPI job".
UNDER_MPI_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", LAUNCHED_FLAG)
# Inherited from an enclosing MPI job, these would confuse a nested mpiexec.
_ENCLOSING_JOB_PREFIXES = ("PMI_", "PMIX_", "OMPI_COMM_WORLD_", "MPI_LOCAL")


class MPIRuntimeNotFound(RuntimeError):
    """No ``mpiexec`` next to the Python interpreter nor on ``PATH``."""


def find_mpiexec() -> str:
    """Path of the ``mpiexec`` to use: ``NBCOLL_MPIEXEC``, else the one next to ``sys.executable``, else ``PATH``.

    The interpreter's own folder comes first so that a virtual environment's MPI (the ``mpich`` wheel) is used
    even when that environment is not activated.
    """
    override = os.environ.get("NBCOLL_MPIEXEC")
    if override:
        return override
    beside_python = Path(sys.executable).parent / "mpiexec"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    on_path = shutil.which("mpiexec")
    if on_path:
        return on_path
    raise MPIRuntimeNotFound(NO_MPI_MESSAGE)


def under_mpi(environ: Mapping[str, str] | None = None) -> bool:
    """True when this process is a rank of an MPI job (started by ``mpiexec`` or by :func:`launch`)."""
    environ = os.environ if environ is None else environ
    return any(environ.get(name) for name in UNDER_MPI_VARIABLES)


# -------------------------------------------------------------------------------------------------------------
# Launching.


def _function_target(function: str | Callable[..., Any]) -> str:
    """``"module:qualname"`` (or ``"path.py:qualname"`` for a function of the main script), checked to be importable.

    Functions travel by name, never pickled: each rank imports the module and looks the name up.
    """
    if isinstance(function, str):
        if ":" not in function:
            raise ValueError(f"function: expected 'module:function', got {function!r}")
        return function
    module_name = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not module_name or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(
            f"function: {function!r} cannot be found by name in another process; "
            "use a function defined at the top level of a module"
        )
    if module_name == "__main__":
        main_file = getattr(sys.modules["__main__"], "__file__", None)
        if not main_file:
            raise ValueError("function: a function of an interactive session cannot be launched; put it in a file")
        return f"{os.path.abspath(main_file)}:{qualname}"
    return f"{module_name}:{qualname}"


def _literal_args(args: Sequence[Any]) -> list[str]:
    """Arguments for a launched function, written as Python literals (no pickle), checked to read back equal."""
    written = []
    for index, value in enumerate(args):
        text = repr(value)
        try:
            same = ast.literal_eval(text) == value
        except (ValueError, SyntaxError):
            same = False
        if not same:
            raise TypeError(
                f"args[{index}]: {value!r} cannot travel to the ranks; "
                "use numbers, strings, bools, None, and tuples/lists/dicts of them"
            )
        written.append(text)
    return written


def _rank_environment(env: Mapping[str, str | None] | None, extra_path: Sequence[str] = ()) -> dict[str, str]:
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_ENCLOSING_JOB_PREFIXES) and name != LAUNCHED_FLAG
    }
    # Unbuffered, so that a rank killed at the timeout has already written everything it printed.
    environ["PYTHONUNBUFFERED"] = "1"
    if extra_path:
        environ["PYTHONPATH"] = os.pathsep.join([*extra_path, *filter(None, [environ.get("PYTHONPATH")])])
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = str(value)
    return environ


def launch(
    nprocs: int,
    script: str | os.PathLike[str] | None = None,
    *,
    code: str | None = None,
    function: str | Callable[..., Any] | None = None,
    args: Sequence[Any] = (),
    env: Mapping[str, str | None] | None = None,
    timeout: float | None = None,
    bind_to: str | None = None,
) -> RankResult:
    """Run one target on ``nprocs`` ranks through ``mpiexec`` and return each rank's output and status.

    Give exactly one target: ``script`` (a file, run as ``python script args...``), ``code`` (run as
    ``python -c code args...``) or ``function`` (``"module:function"`` or a top-level function object; each rank
    calls ``function(*args)``, and its return value lands in ``result.returns``). ``env`` adds variables to the
    inherited environment (``None`` removes one). After ``timeout`` seconds every process of the job is killed
    and the result says so. ``bind_to`` (one of :data:`BINDINGS`) pins each rank to a core, in turn, as latency
    benchmarks are run (``mpiexec -bind-to core``); by default the MPI places them. This function never raises for a
    failing job: call ``result.check()``.
    """
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs: expected an int >= 1, got {nprocs!r}")
    if sum(target is not None for target in (script, code, function)) != 1:
        raise ValueError("script, code, function: give exactly one of them")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout: expected seconds > 0 or None, got {timeout!r}")
    if bind_to is not None and bind_to not in BINDINGS:
        raise ValueError(f"bind_to: expected None or one of {BINDINGS}, got {bind_to!r}")

    extra_path: list[str] = []
    if script is not None:
        if not os.path.isfile(script):
            raise FileNotFoundError(f"script: no such file {os.fspath(script)!r}")
        target = ["script", os.path.abspath(script), *map(str, args)]
    elif code is not None:
        target = ["code", code, *map(str, args)]
    else:
        target = ["function", _function_target(function), *_literal_args(args)]
        # As multiprocessing's spawn does: the ranks import the function's module from the caller's sys.path.
        extra_path = [entry for entry in sys.path if entry and os.path.isdir(entry)]

    mpiexec = find_mpiexec()
    flags = mpiexec_flags(mpiexec, bind_to)
    with tempfile.TemporaryDirectory(prefix="nbcoll_launch_") as output_dir:
        command = [
            mpiexec,
            *flags,
            "-n",
            str(nprocs),
            sys.executable,
            "-m",
            "nbcoll.launch",
            "--as-rank",
            output_dir,
            *target,
        ]
        environ = _rank_environment(env, extra_path)
        environ[LAUNCHED_FLAG] = "1"
        launcher_log = os.path.join(output_dir, "mpiexec.out")
        started = time.monotonic()
        returncode, timed_out = run_job(command, environ, launcher_log, output_dir, timeout)
        elapsed = time.monotonic() - started
        result = _collect(nprocs, returncode, timed_out, timeout, elapsed, output_dir, target[0])
    result.launcher_command = command
    if target[0] == "function":
        result.command = command
    else:
        as_python_args = target[1:] if target[0] == "script" else ["-c", *target[1:]]
        result.command = [mpiexec, *flags, "-n", str(nprocs), sys.executable, *as_python_args]
    return result


def _collect(
    nprocs: int,
    returncode: int | None,
    timed_out: bool,
    timeout: float | None,
    elapsed: float,
    output_dir: str,
    kind: str,
) -> RankResult:
    def read(name: str) -> str | None:
        path = os.path.join(output_dir, name)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()

    outputs = [read(f"rank{r}.out") or "" for r in range(nprocs)]
    statuses = [int(text) if (text := read(f"rank{r}.status")) else None for r in range(nprocs)]
    pids = [int(text) if (text := (read(f"rank{r}.pid") or "").strip()).isdigit() else None for r in range(nprocs)]
    returns = []
    if kind == "function":
        returns = [ast.literal_eval(text) if (text := read(f"rank{r}.return")) else None for r in range(nprocs)]
    return RankResult(
        nprocs=nprocs,
        command=[],
        returncode=returncode,
        outputs=outputs,
        statuses=statuses,
        launcher_output=read("mpiexec.out") or "",
        timed_out=timed_out,
        timeout=timeout,
        elapsed=elapsed,
        returns=returns,
        pids=pids,
    )


# -------------------------------------------------------------------------------------------------------------
# Self re-launch for tutorials, and the command line.


def relaunch(nprocs: int, *, env: Mapping[str, str | None] | None = None, timeout: float | None = None) -> None:
    """Re-run the calling script on ``nprocs`` ranks, unless this process already is a rank.

    Started plainly (``python tutorial.py``), this runs the script again under ``mpiexec``, prints each rank's
    output as one block headed by ``[rank r]``, ranks in order, and exits with the job's status. Under
    ``mpiexec`` (or :func:`launch`) it returns at once, and the script carries on as one rank.
    """
    if under_mpi():
        return
    script = sys.argv[0] if sys.argv else ""
    if not script or script == "-c" or not os.path.isfile(script):
        raise RuntimeError("relaunch(nprocs): call it from a script file started as 'python script.py'")
    result = launch(nprocs, script, args=sys.argv[1:], env=env, timeout=timeout)
    sys.exit(_print_in_rank_order(result))


def _print_in_rank_order(result: RankResult) -> int:
    """Print the ranks' output blocks; on failure say on stderr which ranks failed. Return the exit status."""
    print(result.in_rank_order(), end="", flush=True)
    if not result.ok:
        failed = ", ".join(
            f"rank {rank} {'did not finish' if status is None else f'exited with {status}'}"
            for rank, status in enumerate(result.statuses)
            if status != 0
        )
        print(f"[nbcoll.launch] {result.describe_status()}; {failed or 'no rank failed'}", file=sys.stderr)
        if result.launcher_output.strip():
            print(result.launcher_output.rstrip("\n"), file=sys.stderr)
    return _job_exit_status(result)


def _job_exit_status(result: RankResult) -> int:
    if result.timed_out:
        return 124  # what timeout(1) returns
    failed = [s for s in result.statuses if s]
    if failed:
        return failed[0]
    if result.returncode:
        return result.returncode if result.returncode > 0 else 1
    return 0 if all(s == 0 for s in result.statuses) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nbcoll.launch -n N script.py args...``: run a script on N ranks, print outputs in rank order."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--as-rank"]:
        return run_as_rank(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m nbcoll.launch", description="Run a Python script on N MPI ranks; print each rank's output."
    )
    parser.add_argument("-n", "--nprocs", type=int, required=True, help="number of ranks")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before every rank is killed")
    parser.add_argument("--bind-to", choices=BINDINGS, default=None, help="pin each rank to one of these, in turn")
    parser.add_argument("script", help="the Python script to run on every rank")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    options = parser.parse_args(argv)
    result = launch(options.nprocs, options.script, args=options.args, timeout=options.timeout, bind_to=options.bind_to)
    return _print_in_rank_order(result)


if __name__ == "__main__":
    sys.exit(main())
