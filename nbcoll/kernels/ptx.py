"""Compile every registered kernel to PTX, with no GPU: the check that a kernel is real CUDA code.

The simulator runs any Python, so a kernel can pass every simulator test and still fail to compile for a GPU
(a Python list, a formatted exception, ``%``-formatting). Compiling to PTX catches that on any machine.

Run it in a process where the simulator is off::

    NBCOLL_BACKEND=cuda python -m nbcoll.kernels.ptx          # prints one line per kernel and signature

Numba asks the driver for the current device when a kernel calls a device function; with no GPU there is no
driver, so :func:`compile_all` stands in a device that reports the target compute capability.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
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


def compile_all(cc: tuple[int, int] = (9, 0), workers: int = 1) -> list[PtxResult]:
    """Compile each kernel of :func:`nbcoll.kernels.all_kernels` for each of its signatures.

    ``workers`` > 1 splits the list among as many forked processes (each compile is independent: on two cores
    the check takes 19 s instead of 29 s); the results come back in the registry's order either way.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise RuntimeError("compile_all: the CUDA simulator is on in this process; run with NBCOLL_BACKEND=cuda")
    import numba.cuda.dispatcher as dispatcher

    dispatcher.get_current_device = lambda: _TargetDevice(cc)
    if workers <= 1:
        return _compile_share(cc, 0, 1)
    fork = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=fork, initializer=_compile_without_mpi) as pool:
        shares = list(pool.map(_compile_share, [cc] * workers, range(workers), [workers] * workers))
    results: list[PtxResult] = []
    for i in range(max(len(share) for share in shares)):  # share k holds jobs k, k + workers, ...: interleave
        results += [share[i] for share in shares if i < len(share)]
    return results


def _compile_without_mpi() -> None:
    """A worker's set-up: import every module of nbcoll without starting MPI.

    ``all_kernels`` imports every module, and importing ``mpi4py.MPI`` starts MPI. A forked worker ends without
    finalizing MPI, so it would leave MPI's shared memory in ``/dev/shm``; compiling needs no MPI.
    """
    try:
        import mpi4py
    except ImportError:
        return
    if "mpi4py.MPI" not in sys.modules:  # a parent that had started MPI hands it down; nothing to hold back
        mpi4py.rc.initialize = mpi4py.rc.finalize = False


def _compile_share(cc: tuple[int, int], share: int, shares: int) -> list[PtxResult]:
    """Jobs ``share``, ``share + shares``, ... of the list of (kernel, signature) pairs."""
    from numba import cuda

    from nbcoll.kernels import all_kernels

    jobs = [(entry, signature) for entry in all_kernels() for signature in entry.signatures]
    results = []
    for entry, signature in jobs[share::shares]:
        start = time.perf_counter()
        try:
            ptx, _ = cuda.compile_ptx(entry.py_func, signature, cc=cc)
            ok, message = ".entry" in ptx, "" if ".entry" in ptx else "no .entry in the PTX"
        except Exception as exc:  # every failure is reported, not only the first
            ok, message = False, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        results.append(PtxResult(entry.name, signature, ok, message, time.perf_counter() - start))
    return results


def main() -> int:
    results = compile_all(workers=min(4, os.cpu_count() or 1))
    for r in results:
        status = "ok  " if r.ok else "FAIL"
        print(f"{status} {r.seconds:6.2f}s  {r.kernel}  {r.signature}  {r.message}")
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} compiled, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "cuda")
    sys.exit(main())
