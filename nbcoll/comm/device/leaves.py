"""The leaves every device primitive of :mod:`nbcoll.comm.device.prims` is written in: a load and a store that
no spin may hoist, a group's barrier, and the pause of a spin, each chosen once, at import, for the device backend.

numba-cuda has no volatile or acquire load: its cache-hint loads are inline assembly without side effects, which
the compiler may hoist out of a spin. On a GPU the leaves are therefore intrinsics emitting inline PTX marked
with side effects and a memory clobber (:func:`_ld_volatile`, :func:`_st_volatile`, :func:`_bar_sync`). The
simulator has no inline PTX, so there the same device functions get plain loads and stores (Python threads see
each other's writes), a barrier of atomics in shared memory, and a spin that lets the other Python threads run::

    load_volatile(array, i)          array[i], read from memory on every call
    store_volatile(array, i, value)  array[i] = value, one store where the code says
    _barrier(sync, group, n)         wait until the n threads of the group are here
    spin_pause()                     between two reads of a spin

Example::

    from nbcoll.comm.device.leaves import load_volatile, spin_pause
    while load_volatile(counter, at) < target:      # inside a device function
        spin_pause()
"""

from __future__ import annotations

import time
from typing import Any

from llvmlite import ir
from numba import cuda, types
from numba.core import cgutils
from numba.extending import intrinsic

from nbcoll import backend

SYNC_WORDS = 3
"""Shared int32 words per group: barrier arrivals, barrier generation (simulator only), published status."""
_ARRIVED, _GENERATION, _STATUS = 0, 1, 2


# -- the leaves on a GPU: inline PTX with side effects, so that no load leaves its spin -----------------------


def _element_pointer(context: Any, builder: Any, array_type: Any, array: Any, index_type: Any, index: Any) -> Any:
    """The address of ``array[index]`` of a 1-D array, as LLVM IR."""
    ary = context.make_array(array_type)(context, builder, array)
    at = context.cast(builder, index, index_type, types.intp)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [at], wraparound=False)


def _counter_type(array: Any) -> int:
    """The bit width of a 1-D array of 32- or 64-bit integers (a counter or the abort word); 0 for anything else."""
    ok = isinstance(array, types.Array) and array.ndim == 1 and isinstance(array.dtype, types.Integer)
    return array.dtype.bitwidth if ok and array.dtype.bitwidth in (32, 64) else 0


@intrinsic
def _ld_volatile(typingctx: Any, array: Any, index: Any) -> Any:  # pragma: no cover (compiled)
    """``array[index]`` read with ``ld.volatile.global``: every call reads memory again."""
    bits = _counter_type(array)
    if not bits or not isinstance(index, types.Integer):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        word = ir.IntType(bits)
        reg = "l" if bits == 64 else "r"
        text = f"{{ .reg .u64 g; cvta.to.global.u64 g, $1; ld.volatile.global.u{bits} $0, [g]; }}"
        asm = ir.InlineAsm(ir.FunctionType(word, [word.as_pointer()]), text, f"={reg},l,~{{memory}}", side_effect=True)
        return builder.call(asm, [ptr])

    return array.dtype(array, index), codegen


@intrinsic
def _st_volatile(typingctx: Any, array: Any, index: Any, value: Any) -> Any:  # pragma: no cover (compiled)
    """``array[index] = value`` written with ``st.volatile.global``: one store, where and when the code says."""
    bits = _counter_type(array)
    if not bits or not isinstance(index, types.Integer) or not isinstance(value, types.Integer):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        word = ir.IntType(bits)
        reg = "l" if bits == 64 else "r"
        stored = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        text = f"{{ .reg .u64 g; cvta.to.global.u64 g, $0; st.volatile.global.u{bits} [g], $1; }}"
        kind = ir.FunctionType(ir.VoidType(), [word.as_pointer(), word])
        builder.call(ir.InlineAsm(kind, text, f"l,{reg},~{{memory}}", side_effect=True), [ptr, stored])
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@intrinsic
def _bar_sync(typingctx: Any, barrier: Any, nthreads: Any) -> Any:  # pragma: no cover (compiled)
    """``barrier.sync barrier, nthreads``: wait until ``nthreads`` threads (a multiple of 32) arrive at it."""
    if not isinstance(barrier, types.Integer) or not isinstance(nthreads, types.Integer):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        i32 = ir.IntType(32)
        values = [context.cast(builder, v, t, types.int32) for v, t in zip(args, sig.args, strict=True)]
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, i32]), "barrier.sync $0, $1;", "r,r,~{memory}",
                           side_effect=True)  # fmt: skip
        builder.call(asm, values)
        return context.get_dummy_value()

    return types.void(barrier, nthreads), codegen


@cuda.jit(device=True)
def _barrier_gpu(sync, group, nthreads):
    # One thread: wait at the group's named barrier (1 + group; 0 is syncthreads).
    _bar_sync(1 + group, nthreads)


@cuda.jit(device=True)
def _pause_gpu():
    # One thread: nothing; a GPU spin retries at once, as NCCL's does.
    pass


# -- the leaves on the simulator: plain Python, its CUDA threads are Python threads ----------------------------


def _load_plain(array: Any, index: int) -> Any:
    return array[index]


def _store_plain(array: Any, index: int, value: Any) -> None:
    array[index] = value


def _pause_simulated() -> None:
    time.sleep(0)  # let the thread that will move the counter run; a Python spin would hold the interpreter


@cuda.jit(device=True)
def _barrier_simulated(sync, group, nthreads):
    """A counting barrier: the last of ``nthreads`` to arrive resets the count and moves the generation on.

    ``generation = sync[g]; if atomic_add(arrived) == nthreads - 1: arrived = 0; generation += 1;
    else: while sync[g] == generation: pause``
    """
    at = group * SYNC_WORDS
    generation = sync[at + _GENERATION]  # cannot move before this thread arrives: the barrier waits for it
    if cuda.atomic.add(sync, at + _ARRIVED, 1) == nthreads - 1:
        sync[at + _ARRIVED] = 0
        cuda.atomic.add(sync, at + _GENERATION, 1)
    else:
        while _load_plain(sync, at + _GENERATION) == generation:
            _pause_simulated()


# The leaves every primitive is written in, chosen once for this process's device backend.
if backend.is_simulator():
    load_volatile, store_volatile = _load_plain, _store_plain
    spin_pause, _barrier = _pause_simulated, _barrier_simulated
else:
    load_volatile, store_volatile = _ld_volatile, _st_volatile
    spin_pause, _barrier = _pause_gpu, _barrier_gpu
