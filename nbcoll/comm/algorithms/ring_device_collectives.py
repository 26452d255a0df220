"""The other ring collectives of :mod:`.ring` as kernels, in the one-GPU world of :mod:`.ring_device`.

As there, rank ``r`` is thread group ``r`` of one block, block ``c`` is channel ``c`` (its part of each rank's
block, ``Context.part``), and every step moves one chunk of at most one FIFO slot through the primitives of
:mod:`nbcoll.comm.device.prims`. Each kernel is its host function's loop, step for step (NCCL's ``runRing`` of
``all_gather.h``, ``reduce_scatter.h``, ``broadcast.h`` and ``reduce.h``)::

    all_gather       per chunk: copy_send own block, (n-2) x recv_copy_send block r-j, recv block r+1
    reduce_scatter   per chunk: send block r-1, (n-2) x recv_reduce_send block r-j, recv_reduce_copy block r
    broadcast        a chain from root:   root copy_send, the next n-2 recv_copy_send, the last recv
    reduce           a chain ending at root: root+1 send, the next n-2 recv_reduce_send, root recv_reduce_copy

A world of one rank copies (``common.single_rank``). Each kernel has a NumPy reference beside it that takes the
same steps, so its floating-point results are the kernel's to the bit. :class:`DeviceRingCollectives` launches
them (:mod:`.ring_device_world`) on the FIFOs and counters of a :class:`~.ring_device.DeviceRing`.

Example (on the simulator)::

    ring = DeviceRingCollectives(3, slot_elems=4, group_threads=4)
    x = np.arange(6, dtype=np.int64).reshape(3, 2)
    ring.all_gather(x, np.zeros((3, 6), np.int64))     # every row is [0, 1, 2, 3, 4, 5]
    ring.reduce(x, root=2)                             # row 2 is [6, 9]; rows 0 and 1 are as they were
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numba import cuda, int32, int64

from nbcoll.comm.algorithms.common import blocks, chunks
from nbcoll.comm.algorithms.ring_device import block_span, copy_rank
from nbcoll.comm.device import prims as dp
from nbcoll.kernels.registry import register

_SYNC_WORDS = dp.MAX_GROUPS * dp.SYNC_WORDS
_STATE_WORDS = dp.STATE_WORDS
_FOLD = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _steps(count: int, slot_elems: int, nchannels: int) -> Iterator[tuple[int, int]]:
    """The chunks ``[lo, hi)`` of a rank's block, channel after channel, as the kernels' blocks take them."""
    for lo, hi in blocks(0, count, nchannels):
        yield from chunks(lo, hi, slot_elems)


# -- the references: the kernels' steps in NumPy -------------------------------------------------------------


def all_gather_reference(local: np.ndarray, slot_elems: int = 1024, nchannels: int = 1) -> np.ndarray:
    """Row ``r`` of the result is every rank's ``local`` row in rank order, gathered as the ring passes chunks on.

    >>> all_gather_reference(np.array([[1, 2], [3, 4]]), slot_elems=1)
    array([[1, 2, 3, 4],
           [1, 2, 3, 4]])
    """
    n, count = local.shape
    out = np.zeros((n, n * count), local.dtype)
    for lo, hi in _steps(count, slot_elems, nchannels):
        sent = [local[r, lo:hi] for r in range(n)]  # copy_send: keep this rank's chunk, pass it on
        for r in range(n):
            out[r, r * count + lo : r * count + hi] = sent[r]
        for j in range(1, n):  # recv_copy_send, ..., recv: block r-j arrives from the previous rank
            sent = [sent[(r - 1) % n] for r in range(n)]
            for r in range(n):
                b = (r - j) % n
                out[r, b * count + lo : b * count + hi] = sent[r]
    return out


def reduce_scatter_reference(
    local: np.ndarray, op: str = "sum", slot_elems: int = 1024, nchannels: int = 1
) -> np.ndarray:
    """Row ``r`` of the result is ``op`` over the ranks of block ``r`` of ``local``, folded in the ring's order:
    block ``b`` starts on rank ``b+1`` and ends on rank ``b``.

    >>> reduce_scatter_reference(np.array([[1, 2], [10, 20]]), slot_elems=1)
    array([[11],
           [22]])
    """
    n, total = local.shape
    count, fold = total // n, _FOLD[op]
    out = np.zeros((n, count), local.dtype)
    with np.errstate(all="ignore"):  # integers wrap as the kernel's do
        for lo, hi in _steps(count, slot_elems, nchannels):
            span = [slice(b * count + lo, b * count + hi) for b in range(n)]  # this chunk of each block
            sent = [local[r, span[(r - 1) % n]] for r in range(n)]  # send: block r-1 starts here
            for j in range(2, n + 1):  # recv_reduce_send ..., and at j = n recv_reduce_copy of block r
                sent = [fold(local[r, span[(r - j) % n]], sent[(r - 1) % n]) for r in range(n)]
            for r in range(n):
                out[r, lo:hi] = sent[r]
    return out


def broadcast_reference(src: np.ndarray, root: int, slot_elems: int = 1024, nchannels: int = 1) -> np.ndarray:
    """Every row of the result is ``src[root]``, passed down the chain from the root one chunk at a time.

    >>> broadcast_reference(np.array([[1, 2], [3, 4], [5, 6]]), root=2)
    array([[5, 6],
           [5, 6],
           [5, 6]])
    """
    n = src.shape[0]
    out = np.zeros_like(src)
    for lo, hi in _steps(src.shape[1], slot_elems, nchannels):
        sent = src[root, lo:hi]
        for position in range(n):  # each rank of the chain keeps the chunk and passes it on
            out[(root + position) % n, lo:hi] = sent
    return out


def reduce_reference(
    local: np.ndarray, op: str = "sum", root: int = 0, slot_elems: int = 1024, nchannels: int = 1
) -> np.ndarray:
    """What the root ends with (the other ranks end with nothing): ``op`` over the ranks, folded down the chain
    that starts at ``root + 1`` and ends at ``root``.

    >>> reduce_reference(np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]]), "sum", root=1)
    array([111., 222.])
    """
    n, count = local.shape
    fold, first = _FOLD[op], (root + 1) % n
    result = np.zeros(count, local.dtype)
    with np.errstate(all="ignore"):
        for lo, hi in _steps(count, slot_elems, nchannels):
            partial = local[first, lo:hi]  # send
            for position in range(1, n):  # recv_reduce_send ..., and on the root recv_reduce_copy
                partial = fold(local[(first + position) % n, lo:hi], partial)
            result[lo:hi] = partial
    return result


# -- the kernels: one rank's loop each, as in ring.py ----------------------------------------------------------


@cuda.jit(device=True)
def group_of_this_thread(group_threads):
    # One thread: which rank's group it is in, and which thread of that group (as ring_all_reduce_kernel).
    return int64(cuda.threadIdx.x // group_threads), int64(cuda.threadIdx.x % group_threads)


@cuda.jit(device=True)
def bind_prims(fifo, tail, head, abort, sync, state, rank, thread, op, group_threads, scope, spins_before_check):
    """One thread of rank ``rank``: its primitives on channel ``blockIdx.x`` (NCCL's ``Primitives`` constructor).

    ``state = (tail of next, head of mine, OK, 0)``: the counters this rank alone writes say where the last call
    left off, as they are never reset; ``return (fifo, tail, head, abort, sync, state, ids)``
    """
    nranks, channel = fifo.shape[1], int64(cuda.blockIdx.x)
    nxt = (rank + 1) % nranks
    state[dp.SENT] = dp.load_volatile(tail, dp._counter_at(channel, nxt, nranks))
    state[dp.RECEIVED] = dp.load_volatile(head, dp._counter_at(channel, rank, nranks))
    state[dp.CODE] = dp.OK
    state[dp.STEPS] = 0
    ids = (channel, rank, nxt, thread, group_threads, rank, op, scope, spins_before_check)
    return (fifo, tail, head, abort, sync, state, ids)


@cuda.jit(device=True)
def channel_part(count):
    # One thread: this block's channel's part [lo, hi) of a rank's block of `count` elements (Context.part).
    return block_span(0, count, int64(cuda.gridDim.x), int64(cuda.blockIdx.x))


@cuda.jit(device=True)
def report(status, state, rank, thread):
    # Thread 0 of a rank: write its (code, steps started) for the host.
    if thread == 0:
        status[cuda.blockIdx.x, rank, 0] = state[dp.CODE]
        status[cuda.blockIdx.x, rank, 1] = state[dp.STEPS]


def _signature(dtype: str) -> str:
    # Every kernel takes the same arguments (some use only a few), so that one launch serves them all.
    data = f"{dtype}[:, ::1]"
    return (
        f"void({data}, {data}, {dtype}[:, :, :, ::1], int64[::1], int64[::1], int32[::1], int64[:, :, ::1], "
        "int64, int64, int64, int64, int64, int64)"
    )


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_all_gather_kernel(local, out, fifo, tail, head, abort, status, op, root, in_place, group_threads, scope,
                           spins_before_check):  # fmt: skip
    """One thread of a rank's group: :func:`.ring.all_gather`, ``out[r, b*count:(b+1)*count] = local[b]``.

    ``for each chunk [lo, hi) of this channel's part: copy_send(own lo:hi -> out block r);
    for j in 1 .. n-2: recv_copy_send(block r-j); recv(block r+1)``. In place, ``local`` is ``out`` and this
    rank's input is its own block of it."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    dp.clear_sync(sync)
    cuda.syncthreads()  # the only block-wide barrier: after it each rank meets only its own group
    nranks, slot_elems = local.shape[0], fifo.shape[3]
    rank, thread = group_of_this_thread(group_threads)
    if rank >= nranks:
        return
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_prims(fifo, tail, head, abort, sync, state, rank, thread, op, group_threads, scope,
                       spins_before_check)  # fmt: skip
    count = out.shape[1] // nranks
    own = rank * count * in_place  # where this rank's input starts in `local`
    lo, hi = channel_part(count)
    if nranks == 1:
        copy_rank(local, out, rank, lo, hi, thread, group_threads)
        lo = hi
    for base in range(lo, hi, slot_elems):
        top = min(base + slot_elems, hi)
        dp.generic_op(prims, local, out, dp.COPY | dp.SEND, own + base, own + top, rank * count + base)
        for j in range(1, nranks - 1):
            b = (rank - j + nranks) % nranks
            dp.recv_copy_send(prims, local, out, b * count + base, b * count + top)
        b = (rank + 1) % nranks
        dp.recv(prims, local, out, b * count + base, b * count + top)
    report(status, state, rank, thread)


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_reduce_scatter_kernel(local, out, fifo, tail, head, abort, status, op, root, in_place, group_threads,
                               scope, spins_before_check):  # fmt: skip
    """One thread of a rank's group: :func:`.ring.reduce_scatter`, ``out[r] = op over ranks of local[:, block r]``.

    ``for each chunk [lo, hi) of this channel's part: send(block r-1); for j in 2 .. n-1:
    recv_reduce_send(block r-j); recv_reduce_copy(block r -> out lo:hi)``. In place, ``out`` is ``local`` and
    this rank's result lands in its own block of it."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    dp.clear_sync(sync)
    cuda.syncthreads()
    nranks, slot_elems = local.shape[0], fifo.shape[3]
    rank, thread = group_of_this_thread(group_threads)
    if rank >= nranks:
        return
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_prims(fifo, tail, head, abort, sync, state, rank, thread, op, group_threads, scope,
                       spins_before_check)  # fmt: skip
    count = local.shape[1] // nranks
    own = rank * count * in_place  # where this rank's result starts in `out`
    lo, hi = channel_part(count)
    if nranks == 1:
        copy_rank(local, out, rank, lo, hi, thread, group_threads)
        lo = hi
    for base in range(lo, hi, slot_elems):
        top = min(base + slot_elems, hi)
        b = (rank - 1 + nranks) % nranks
        dp.send(prims, local, out, b * count + base, b * count + top)
        for j in range(2, nranks):
            b = (rank - j + nranks) % nranks
            dp.recv_reduce_send(prims, local, out, b * count + base, b * count + top)
        flags = dp.RECV | dp.REDUCE | dp.COPY
        dp.generic_op(prims, local, out, flags, rank * count + base, rank * count + top, own + base)
    report(status, state, rank, thread)


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_broadcast_kernel(local, out, fifo, tail, head, abort, status, op, root, in_place, group_threads, scope,
                          spins_before_check):  # fmt: skip
    """One thread of a rank's group: :func:`.ring.broadcast`, a chain from ``root`` (``local`` read on it only).

    ``position = (r - root) % n; for each chunk: copy_send (position 0), recv_copy_send (1 .. n-2), recv
    (n-1)``: the link from the last rank back to the root carries nothing."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    dp.clear_sync(sync)
    cuda.syncthreads()
    nranks, slot_elems = local.shape[0], fifo.shape[3]
    rank, thread = group_of_this_thread(group_threads)
    if rank >= nranks:
        return
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_prims(fifo, tail, head, abort, sync, state, rank, thread, op, group_threads, scope,
                       spins_before_check)  # fmt: skip
    position = (rank - root + nranks) % nranks
    lo, hi = channel_part(out.shape[1])
    if nranks == 1:
        copy_rank(local, out, rank, lo, hi, thread, group_threads)
        lo = hi
    if position == 0:
        for base in range(lo, hi, slot_elems):
            dp.copy_send(prims, local, out, base, min(base + slot_elems, hi))
    elif position < nranks - 1:
        for base in range(lo, hi, slot_elems):
            dp.recv_copy_send(prims, local, out, base, min(base + slot_elems, hi))
    else:
        for base in range(lo, hi, slot_elems):
            dp.recv(prims, local, out, base, min(base + slot_elems, hi))
    report(status, state, rank, thread)


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_reduce_kernel(local, out, fifo, tail, head, abort, status, op, root, in_place, group_threads, scope,
                       spins_before_check):  # fmt: skip
    """One thread of a rank's group: :func:`.ring.reduce`, a chain ending at ``root`` (``out`` written on it only).

    ``position = (r - root - 1) % n; for each chunk: send (position 0), recv_reduce_send (1 .. n-2),
    recv_reduce_copy (n-1, the root)``."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    dp.clear_sync(sync)
    cuda.syncthreads()
    nranks, slot_elems = local.shape[0], fifo.shape[3]
    rank, thread = group_of_this_thread(group_threads)
    if rank >= nranks:
        return
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_prims(fifo, tail, head, abort, sync, state, rank, thread, op, group_threads, scope,
                       spins_before_check)  # fmt: skip
    position = (rank - root - 1 + nranks) % nranks  # root is last
    lo, hi = channel_part(local.shape[1])
    if nranks == 1:
        copy_rank(local, out, rank, lo, hi, thread, group_threads)
        lo = hi
    if position == 0:
        for base in range(lo, hi, slot_elems):
            dp.send(prims, local, out, base, min(base + slot_elems, hi))
    elif position < nranks - 1:
        for base in range(lo, hi, slot_elems):
            dp.recv_reduce_send(prims, local, out, base, min(base + slot_elems, hi))
    else:
        for base in range(lo, hi, slot_elems):
            dp.recv_reduce_copy(prims, local, out, base, min(base + slot_elems, hi))
    report(status, state, rank, thread)


KERNELS = {
    "all_gather": ring_all_gather_kernel,
    "reduce_scatter": ring_reduce_scatter_kernel,
    "broadcast": ring_broadcast_kernel,
    "reduce": ring_reduce_kernel,
}
"""Each collective's kernel, by the name the communicator gives it."""
