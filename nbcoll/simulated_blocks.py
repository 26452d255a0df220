"""The simulator's blocks, run in the launching thread when no thread of the kernel waits for another.

Numba's CUDA simulator runs every CUDA thread of a block as a Python thread of its own, so that ``syncthreads``
can hold each one until the others arrive. Starting a Python thread costs about 0.3 ms, which is most of what a
simulated launch of an elementwise kernel takes. A kernel that never meets its block (no ``syncthreads``, no
shared memory, no warp vote or shuffle, in itself or in any device function it calls) needs none of that: here
its CUDA threads run one after the other in the thread that launched it, each with its own ``threadIdx`` and
``blockIdx``. What a thread computes is the same either way; only the threads' order is fixed (the GIL ran them
one at a time already). An error names the CUDA thread as the simulator's own threads name it.

Every kernel that does meet its block (block reductions, tiled matmul, softmax, transpose) keeps the simulator's
threads. ``independent_threads(fn)`` says which kind a kernel is; it reads the names the code uses, following
device functions, plain functions and closures, and answers "no" whenever it cannot tell.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import numpy as np

BLOCK_WIDE = frozenset(
    {
        "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp", "shared",
        "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "all_sync", "any_sync", "eq_sync",
        "ballot_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt", "cg", "this_grid",
        "spin_pause",
    }
)  # fmt: skip
"""Names that make a CUDA thread depend on the others of its block (or grid): such kernels keep real threads.
``spin_pause`` is the pause of a spin on memory another thread writes (:mod:`nbcoll.comm.device.prims`)."""

_verdicts: dict[Any, bool] = {}


def independent_threads(fn: Any) -> bool:
    """Whether no CUDA thread of ``fn`` (a kernel's Python function) can wait for, or see the turn of, another.

    >>> from nbcoll.kernels import copy, reduction
    >>> independent_threads(copy.copy_kernel.py_func)                   # for i: dst[i] = src[i]
    True
    >>> independent_threads(reduction.REDUCE_KERNELS["sum"].py_func)    # a block reduction: syncthreads
    False
    """
    if fn not in _verdicts:
        try:
            _verdicts[fn] = _code_is_independent(fn, set())
        except Exception:  # anything unexpected: the simulator's own threads are always right
            _verdicts[fn] = False
    return _verdicts[fn]


def _code_is_independent(fn: Any, seen: set[int]) -> bool:
    fn = getattr(fn, "fn", fn)  # a simulated device function wraps its Python function
    if not isinstance(fn, types.FunctionType):
        return True  # a builtin, a class, a NumPy function: nothing of the block in it
    if id(fn) in seen:
        return True
    seen.add(id(fn))
    referenced = [*(cell.cell_contents for cell in fn.__closure__ or ())]
    for code in _code_objects(fn.__code__):
        if BLOCK_WIDE & set(code.co_names) or BLOCK_WIDE & set(code.co_freevars):
            return False
        referenced += [fn.__globals__[name] for name in code.co_names if name in fn.__globals__]
        # A device function reached as ``module.function``: co_names holds both names; numba's own API is judged
        # by BLOCK_WIDE above.
        modules = [obj for obj in referenced if isinstance(obj, types.ModuleType)]
        modules = [m for m in modules if not m.__name__.startswith("numba")]
        referenced += [getattr(m, name) for m in modules for name in code.co_names if hasattr(m, name)]
    callees = [obj for obj in referenced if isinstance(obj, types.FunctionType) or hasattr(obj, "fn")]
    return all(_code_is_independent(callee, seen) for callee in callees)


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and every code object nested in it (inner functions, comprehensions)."""
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [code, *(inner for c in nested for inner in _code_objects(c))]


def install() -> None:
    """Make the simulator run each block of an independent kernel in the launching thread."""
    from numba.cuda.simulator import kernel
    from numba.cuda.simulator.kernelapi import Dim3

    if getattr(kernel.BlockManager, "_nbcoll_in_turn", False):
        return
    run_with_threads = kernel.BlockManager.run

    def run(self: Any, grid_point: Any, *args: Any) -> None:
        if self._debug or not independent_threads(self._f):
            return run_with_threads(self, grid_point, *args)
        me = threading.current_thread()
        saved = {name: me.__dict__.get(name) for name in ("threadIdx", "blockIdx", "thread_id")}
        width, height = self._block_dim[0], self._block_dim[1]
        me.blockIdx = Dim3(*grid_point)
        try:
            for point in np.ndindex(*self._block_dim):
                me.threadIdx = Dim3(*point)
                me.thread_id = point[0] + width * (point[1] + height * point[2])
                try:
                    self._f(*args)
                except Exception as exc:  # named as the simulator's threads name it: tid=[x, y, z] ctaid=[...]
                    where = f"tid={list(point)} ctaid={list(grid_point)}"
                    try:
                        named = type(exc)(f"{where}: {exc}" if str(exc) else where)
                    except Exception:  # an exception type that takes other arguments: as it is
                        raise exc from None
                    raise named.with_traceback(exc.__traceback__) from None
        finally:
            for name, value in saved.items():
                if value is None:
                    me.__dict__.pop(name, None)
                else:
                    setattr(me, name, value)

    kernel.BlockManager.run = run
    kernel.BlockManager._nbcoll_in_turn = True
