"""Compile every registered kernel to PTX, with no GPU: the check that a kernel is real CUDA code.

The simulator runs any Python, so a kernel can pass every simulator test and still fail to compile for a GPU
(a Python list, a formatted exception, ``%``-formatting). Compiling to PTX catches that on any machine.

Run it in a process where the simulator is off::

    NBCOLL_BACKEND=cuda python -m nbcoll.kernels.ptx          # prints one line per kernel and signature

Numba asks the driver for the current device when a kernel calls a device function; with no GPU there is no
driver, so :func:`compile_all` stands in a device that reports the target compute capability.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass


@dataclass
class PtxResult:
    kernel: str
    signature: str
    ok: bool
    message: str
    seconds: float


class _TargetDevice:
    def __init__(self, cc: tuple[int, int]) -> None:
        self.compute_capability = cc


def compile_all(cc: tuple[int, int] = (9, 0)) -> list[PtxResult]:
    """Compile each kernel of :func:`nbcoll.kernels.all_kernels` for each of its signatures."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise RuntimeError("compile_all: the CUDA simulator is on in this process; run with NBCOLL_BACKEND=cuda")
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda

    from nbcoll.kernels import all_kernels

    dispatcher.get_current_device = lambda: _TargetDevice(cc)
    results = []
    for entry in all_kernels():
        for signature in entry.signatures:
            start = time.perf_counter()
            try:
                ptx, _ = cuda.compile_ptx(entry.py_func, signature, cc=cc)
                ok, message = ".entry" in ptx, "" if ".entry" in ptx else "no .entry in the PTX"
            except Exception as exc:  # every failure is reported, not only the first
                ok, message = False, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            results.append(PtxResult(entry.name, signature, ok, message, time.perf_counter() - start))
    return results


def main() -> int:
    results = compile_all()
    for r in results:
        status = "ok  " if r.ok else "FAIL"
        print(f"{status} {r.seconds:6.2f}s  {r.kernel}  {r.signature}  {r.message}")
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} compiled, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "cuda")
    sys.exit(main())
