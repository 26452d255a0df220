"""Helpers shared by the tests of the device collectives: their worlds' inputs, launches bounded in time, and
their kernels' PTX for sm_90 with where its loops are.

The PTX is compiled in a subprocess: the simulator (which these tests run on) and ``compile_ptx`` cannot share a
process. There is no GPU there either, and a kernel that calls device functions asks the driver for the current
device's compute capability, so the subprocess answers for it (``numba.cuda.dispatcher.get_current_device``).
"""

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np


def world(nranks: int, count: int, dtype: Any, seed: int = 0, low: int = -3, high: int = 4) -> np.ndarray:
    """Each rank's input, one row per rank: small integers (exact under every op), or floats with a fraction."""
    rng = np.random.default_rng(seed)
    x = rng.integers(low, high, size=(nranks, count))
    if np.issubdtype(dtype, np.floating):
        x = x + rng.random((nranks, count))
    return x.astype(dtype)


def finishes_within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a thread, so that a kernel that spins forever fails the test instead of hanging the run."""
    result = []
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: a kernel spins with the abort word set"
    assert result, "the call raised (its traceback is above)"
    return result[0]


_COMPILE = """
import importlib, json, sys
import numba.cuda.dispatcher as dispatcher

class Device:  # no GPU here: a kernel that calls device functions asks the driver for one
    compute_capability = (9, 0)

dispatcher.get_current_device = lambda: Device()
from numba import cuda

module, signature, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
found = importlib.import_module(module)
texts = {name: cuda.compile_ptx(getattr(found, name).py_func, signature, cc=(9, 0))[0] for name in names}
json.dump(texts, sys.stdout)
"""


def compile_ptxs(module: str, kernels: Iterable[str], signature: str, timeout: float = 600) -> dict[str, str]:
    """``{kernel: its PTX for sm_90}`` for kernels of ``module`` named ``kernels``, each compiled for ``signature``
    in one subprocess on the ``cuda`` backend."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = "cuda"
    args = [sys.executable, "-c", _COMPILE, module, signature, json.dumps(list(kernels))]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def compile_ptx(module: str, kernel: str, signature: str, timeout: float = 600) -> str:
    """The PTX for sm_90 of one kernel of ``module`` for ``signature`` (:func:`compile_ptxs`)."""
    return compile_ptxs(module, [kernel], signature, timeout)[kernel]


def lines_in_loops(ptx: str, pattern: str) -> tuple[int, int]:
    """How many lines of ``ptx`` match the regular expression ``pattern``, and how many of those lie inside a
    loop: between a label and a branch back to it further down."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\$L__\w+):", line))}
    branch = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+);")
    branches = [(i, m.group(1)) for i, line in enumerate(lines) if (m := branch.search(line))]
    back_edges = [(labels[label], i) for i, label in branches if labels.get(label, i) < i]
    found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    return len(found), sum(any(top < i < bottom for top, bottom in back_edges) for i in found)
