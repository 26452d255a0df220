"""A streaming copy on the CPU: the ``numpy`` backend's copy into a large collective's output, whose stores go
around the caches.

An ordinary store to a line that is not in the cache first reads the line from memory (the read for ownership),
then writes it back when it is evicted: copying ``n`` bytes to a destination that is not cached moves ``3n`` bytes
over the memory bus. A *non-temporal* (streaming) store writes whole lines straight to memory through the
write-combining buffers: ``2n``. When a collective's output is larger than the caches can keep, its lines would
be evicted before anyone reads them anyway, so streaming them saves a third of the traffic, and the bus is what
bounds a large copy on a CPU. In two launches of ``benchmarks/lab/stream_copy.py`` (the Performance page), direct
all-gathers, broadcasts and all-to-alls that streamed took 0.62-0.94 of the time from 8 MiB up at 4 ranks and
0.69-0.93 at 2 ranks, except the 2-rank all-gathers of 8 and 16 MiB (0.86-1.15), but 0.83-1.64 at 4 MiB, whose
outputs stay in the caches: ``NBCOLL_STREAM_BYTES`` (8 MiB) is where a collective starts to stream.

The collectives also stream every copy into memory a peer reads next, from ``NBCOLL_STREAM_SHARED_BYTES`` (16 KiB)
up: a piece staged in a direct window, a chunk written into a peer's FIFO slot and an LL step's lines
(:func:`nbcoll.kernels.ll_host.stream_store`). The reader has read the same lines a round before, so an ordinary
store must first take each one back from the reader's cache. On a machine whose two cores share a cache that costs
little, but on one where they do not (a virtual machine's cores may be placed either way, and moved while it runs),
it took several times the copy itself: 1 MiB written into lines the other process had read took 25 us with ordinary
stores in some minutes and 360-430 us in others, and 40 us with streaming stores in both. The reader then finds the
bytes in memory rather than in a cache (37 us against 24 in the quick minutes), so the streamed copy costs up to
about half as much again there and saves up to five times the time elsewhere (``benchmarks/lab/NOTES.md``, *Copies
into memory a peer reads*).

The C library streams too, but only above ``glibc.cpu.x86_non_temporal_threshold``, which it derives from the
size of the shared cache: a collective copies in pieces of a megabyte or two, far below it, and on a virtual
machine that reports a large last-level cache the threshold can be hundreds of megabytes.

Streaming stores are weakly ordered: another core may see a later ordinary store (a step's flag) before them. So
every copy ends with a store fence (``sfence``), after which all its stores are visible: a flag written after
:func:`copy` returns announces bytes that are there. ::

    head:  for i < a:              dst[i] = src[i]                     (until dst is 32-byte aligned)
    body:  for each 32 bytes at j: dst[j : j + 32] = src[j : j + 32]   (one load, one streaming store)
    tail:  for the last < 32 bytes: dst[i] = src[i]
    sfence

Example::

    >>> import numpy as np
    >>> from nbcoll.kernels import stream_copy
    >>> src, dst = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    >>> if stream_copy.available():
    ...     stream_copy.copy(dst, src)
    ... else:
    ...     dst[:] = src
    >>> bool((dst == src).all())
    True
"""

from __future__ import annotations

import functools
import platform
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from nbcoll import backend

LINE = 32
"""Bytes one streaming store writes (an AVX register; every x86-64 CPU of the last decade has them)."""


def copy_reference(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``for i: dst[i] = src[i]``: what :func:`copy` computes, with ordinary stores."""
    np.copyto(dst, src)
    return dst


@intrinsic
def _stream_line(typingctx: Any, dst_address: Any, src_address: Any) -> Any:  # pragma: no cover (compiled)
    """``dst[0:32] = src[0:32]`` at two addresses (integers): one unaligned load, one aligned streaming store."""
    signature = types.void(dst_address, src_address)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        line = ir.VectorType(ir.IntType(64), LINE // 8)
        value = builder.load(builder.inttoptr(args[1], line.as_pointer()), align=1)
        store = builder.store(value, builder.inttoptr(args[0], line.as_pointer()), align=LINE)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def stream_word(typingctx: Any, address: Any, value: Any) -> Any:  # pragma: no cover (compiled)
    """``*address = value`` for a ``uint64`` at an 8-byte aligned address, in one streaming store: one access, so a
    reader sees the old word or the new one, never half of each (an LL line, :mod:`nbcoll.kernels.ll_host`)."""
    signature = types.void(address, value)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        store = builder.store(args[1], builder.inttoptr(args[0], ir.IntType(64).as_pointer()), align=8)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def store_fence(typingctx: Any) -> Any:  # pragma: no cover (compiled)
    """``sfence``: every store before it, streaming ones included, is visible before any store after it."""
    signature = types.void()

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        name, kind = "llvm.x86.sse.sfence", ir.FunctionType(ir.VoidType(), [])
        fence = builder.module.globals.get(name) or ir.Function(builder.module, kind, name)
        builder.call(fence, [])
        return context.get_dummy_value()

    return signature, codegen


# cache=True: a process loads the compiled loop from __pycache__ instead of compiling it again.
@njit(cache=True)
def _stream_bytes(dst, src):  # pragma: no cover (compiled)
    """``dst[:] = src`` for two byte arrays of one size: the head and tail byte by byte, the body in streaming
    lines, then a fence."""
    n = dst.size
    if src.size != n:  # a store past dst could land in a peer's mapped buffer: refuse rather than write
        raise ValueError("stream_copy: dst and src differ in size")
    dst_at, src_at = np.int64(dst.ctypes.data), np.int64(src.ctypes.data)  # signed: uint64 with int64 is float64
    head = min((LINE - dst_at % LINE) % LINE, n)
    for i in range(head):
        dst[i] = src[i]
    lines = (n - head) // LINE
    for k in range(lines):
        offset = head + k * LINE
        _stream_line(dst_at + offset, src_at + offset)
    for i in range(head + lines * LINE, n):
        dst[i] = src[i]
    store_fence()


@functools.cache
def available() -> bool:
    """Whether this CPU streams: an x86-64 one (the fence and the stores are x86's)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def on_host() -> bool:
    """Whether this process's collectives can stream: they copy host arrays (the ``numpy`` backend) on a CPU that
    streams."""
    return backend.get_backend() == "numpy" and available()


def copy(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``for i: dst[i] = src[i]`` for contiguous host arrays of one dtype and size, in streaming stores, then a
    fence (the module docstring). Only where :func:`available`; the collectives check their buffers once, at the
    call, and the compiled loop refuses two sizes."""
    _stream_bytes(dst.view(np.uint8), src.view(np.uint8))
    return dst
