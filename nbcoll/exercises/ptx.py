"""Compile learners' kernels to PTX for sm_90, in a process of their own: code that runs only in the simulator
(a Python list, a formatted exception) fails here.

The simulator and ``compile_ptx`` cannot share a process, so :func:`compile_files` starts one subprocess for a
whole list of files::

    compile_files([("map_kernel", "map_kernel.py")])     # [("axpb_kernel", True, "")]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence

TIMEOUT_SECONDS = 300.0


def compile_files(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, bool, str]]:
    """``(exercise, file)`` pairs -> ``(kernel, compiled, error message)`` in the same order, one subprocess."""
    if not pairs:
        return []
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = "cuda"
    args = [f"{name}={os.path.abspath(path)}" for name, path in pairs]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "nbcoll.exercises.ptx", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return [(name, False, f"the PTX compile took over {TIMEOUT_SECONDS:.0f} s") for name, _ in pairs]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(results) != len(pairs):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return [(name, False, "the PTX compiler process failed: " + " / ".join(tail)) for name, _ in pairs]
    return [(r["kernel"], r["ok"], r["message"]) for r in results]


def explain(message: str) -> str:
    """The compiler's message, with what it usually means for a kernel that passed on the simulator."""
    return (
        f"the kernel runs on the simulator but does not compile for a GPU:\n{message}\n"
        "The simulator runs any Python; a GPU kernel cannot use Python lists, dicts, exceptions with formatted "
        "messages, f-strings or %-formatting, nor call functions that are not cuda.jit(device=True)."
    )


def _compile_one(name: str, path: str) -> dict:
    from numba import cuda

    from nbcoll.exercises import catalog

    exercise = catalog.get(name)
    try:
        module = catalog.load_learner(path)
        kernel = getattr(module, exercise.entry)
        ptx, _ = cuda.compile_ptx(kernel.py_func, exercise.ptx_signature, cc=(9, 0))
        ok, message = ".entry" in ptx, "" if ".entry" in ptx else "no .entry in the PTX"
    except Exception as exc:  # every compiler error is reported to the learner
        lines = [line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
        ok, message = False, "\n".join(lines[:4])[:600]
    return {"kernel": exercise.entry, "ok": ok, "message": message}


def main(argv: Sequence[str]) -> int:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise SystemExit("nbcoll.exercises.ptx: the CUDA simulator is on; run with NBCOLL_BACKEND=cuda")
    import numba.cuda.dispatcher as dispatcher

    from nbcoll.kernels.ptx import _TargetDevice

    dispatcher.get_current_device = lambda: _TargetDevice((9, 0))  # no GPU: stand in one of compute capability 9.0
    for arg in argv:
        name, path = arg.split("=", 1)
        print(json.dumps(_compile_one(name, path)), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "cuda")
    sys.exit(main(sys.argv[1:]))
