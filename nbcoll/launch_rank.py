"""What runs inside each launched rank: ``python -m nbcoll.launch --as-rank OUTPUT_DIR KIND TARGET ARGS...``.

The wrapper points the rank's stdout and stderr at ``OUTPUT_DIR/rank<r>.out`` (at the descriptor level, so that C
extensions and child processes write there too), records its pid and exit status next to it, then runs the
target: a script, a snippet of code, or ``module:function`` whose return value travels back as a Python literal.

Example::

    >>> from nbcoll.launch_rank import literal_return
    >>> literal_return((1, [2.5, "three"]))
    "(1, [2.5, 'three'])"
"""

from __future__ import annotations

import ast
import importlib
import os
import runpy
import sys
import traceback
import types
from pathlib import Path
from typing import Any

# Variables through which MPI implementations tell a process its rank; the first one present wins.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def _rank_number() -> int:
    for name in RANK_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    raise RuntimeError(f"nbcoll.launch --as-rank: none of {', '.join(RANK_VARIABLES)} is set; run under mpiexec")


def run_as_rank(argv: list[str]) -> int:
    output_dir, kind, target, *args = argv
    rank = _rank_number()
    prefix = os.path.join(output_dir, f"rank{rank}")
    output = os.open(prefix + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # At the descriptor level, so that C extensions and child processes write there too.
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    Path(prefix + ".pid").write_text(str(os.getpid()))
    try:
        result = _run_target(kind, target, args)
        if kind == "function":
            Path(prefix + ".return").write_text(literal_return(result))
        status = 0
    except SystemExit as stop:
        status = _exit_status(stop.code)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    Path(prefix + ".status").write_text(str(status))
    if status:
        _abort_mpi_job(status)
    return status


def _abort_mpi_job(status: int) -> None:
    """End the whole job when this rank fails after starting MPI, as ``python -m mpi4py`` does.

    Otherwise the other ranks wait for this one in their next collective until the timeout, and the report
    shows a hang instead of the error.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(status)


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def literal_return(value: Any) -> str:
    if hasattr(value, "tolist"):  # NumPy arrays and scalars
        value = value.tolist()
    text = repr(value)
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise TypeError(
            f"the launched function returned {type(value).__name__}, which cannot travel back; "
            "return numbers, strings, bools, None, NumPy values, or tuples/lists/dicts of them"
        ) from None
    return text


def _run_target(kind: str, target: str, args: list[str]) -> Any:
    if kind == "script":
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(target)
        runpy.run_path(target, run_name="__main__")
        return None
    if kind == "code":
        sys.argv = ["-c", *args]
        sys.path[0] = ""
        main_module = types.ModuleType("__main__")
        sys.modules["__main__"] = main_module
        exec(compile(target, "<string>", "exec"), main_module.__dict__)
        return None
    module_name, qualname = target.rsplit(":", 1)
    if module_name.endswith(".py"):
        # A function of a main script: load the script under another name, so its `if __name__ == "__main__"`
        # block does not run again (multiprocessing's spawn does the same).
        namespace = runpy.run_path(module_name, run_name="__mp_main__")
        holder: Any = types.SimpleNamespace(**namespace)
    else:
        holder = importlib.import_module(module_name)
    function = holder
    for part in qualname.split("."):
        function = getattr(function, part)
    return function(*(ast.literal_eval(arg) for arg in args))
