"""The ring's all-gather, reduce-scatter, broadcast and reduce as one kernel per rank, as :mod:`.ring_device_rank`
does the all-reduce: each rank's process launches its own kernel, one block per channel, every thread of the block
in the rank's group, spinning on the counters its neighbours write.

The connections are :mod:`.ring_device_rank`'s (``fifo_in``/``fifo_out``, ``ctr_in``/``ctr_out``, ``abort``), and
the schedules are those of :mod:`.ring` and of the one-process world's kernels (:mod:`.ring_device_collectives`),
step for step (NCCL's ``runRing`` of ``all_gather.h``, ``reduce_scatter.h``, ``broadcast.h`` and ``reduce.h``)::

    all_gather       per chunk: copy_send own block, (n-2) x recv_copy_send block r-j, recv block r+1
    reduce_scatter   per chunk: send block r-1, (n-2) x recv_reduce_send block r-j, recv_reduce_copy block r
    broadcast        a chain from root:   root copy_send, the next n-2 recv_copy_send, the last recv
    reduce           a chain ending at root: root+1 send, the next n-2 recv_reduce_send, root recv_reduce_copy

Each link carries as many steps out as in, so after any of them every tail equals its head again and the next
kernel, of whichever collective, carries on counting. Each rank's result is its row of the world reference
(:func:`all_gather_rank_reference` ...), so floating-point results are the world kernels' to the bit.

Example (each rank's process, once its connections are mapped; :mod:`nbcoll.comm.device_ring_calls` does it)::

    KERNELS["broadcast"][nchannels, threads](x, x, fifo_in, fifo_out, ctr_in, ctr_out, abort, status,
                                             rank, nranks, OP_SUM, SCOPE_SYSTEM, spins, root)
"""

from __future__ import annotations

import numpy as np
from numba import cuda, int32, int64

from nbcoll.comm.algorithms import ring_device_collectives as world
from nbcoll.comm.algorithms.ring_device import block_span
from nbcoll.comm.algorithms.ring_device_rank import HEAD, TAIL
from nbcoll.comm.device import prims as dp
from nbcoll.kernels.registry import register

_SYNC_WORDS = dp.SYNC_WORDS
_STATE_WORDS = dp.STATE_WORDS
# The steps' flags (prims.generic_op's template arguments), as module-level ints: constants to Numba.
_SEND, _RECV_COPY, _COPY_SEND = dp.SEND, dp.RECV | dp.COPY, dp.COPY | dp.SEND
_RECV_COPY_SEND, _RECV_REDUCE_SEND = dp.RECV | dp.COPY | dp.SEND, dp.RECV | dp.REDUCE | dp.SEND
_RECV_REDUCE_COPY = dp.RECV | dp.REDUCE | dp.COPY


# -- the references: each rank's row of the world's ---------------------------------------------------------------


def all_gather_rank_reference(inputs: np.ndarray, rank: int, slot_elems: int = 1024, nchannels: int = 1):
    """What :func:`ring_rank_all_gather_kernel` leaves in rank ``rank``'s output, given every rank's input (rows).

    >>> all_gather_rank_reference(np.array([[1, 2], [3, 4]]), 1, slot_elems=1)
    array([1, 2, 3, 4])
    """
    return world.all_gather_reference(inputs, slot_elems, nchannels)[rank]


def reduce_scatter_rank_reference(inputs: np.ndarray, rank: int, op: str = "sum", slot_elems: int = 1024,
                                  nchannels: int = 1):  # fmt: skip
    """What :func:`ring_rank_reduce_scatter_kernel` leaves in rank ``rank``'s output: its block, folded in the
    ring's order.

    >>> reduce_scatter_rank_reference(np.array([[1, 2], [10, 20]]), 1, slot_elems=1)
    array([22])
    """
    return world.reduce_scatter_reference(inputs, op, slot_elems, nchannels)[rank]


def broadcast_rank_reference(inputs: np.ndarray, rank: int, root: int, slot_elems: int = 1024, nchannels: int = 1):
    """What :func:`ring_rank_broadcast_kernel` leaves in rank ``rank``'s output: the root's input.

    >>> broadcast_rank_reference(np.array([[1, 2], [3, 4], [5, 6]]), 0, root=2)
    array([5, 6])
    """
    return world.broadcast_reference(inputs, root, slot_elems, nchannels)[rank]


def reduce_rank_reference(inputs: np.ndarray, op: str = "sum", root: int = 0, slot_elems: int = 1024,
                          nchannels: int = 1):  # fmt: skip
    """What :func:`ring_rank_reduce_kernel` leaves in the root's output (the other ranks' it does not write).

    >>> reduce_rank_reference(np.array([[1, 2], [10, 20], [100, 200]]), "sum", root=1)
    array([111, 222])
    """
    return world.reduce_reference(inputs, op, root, slot_elems, nchannels)


# -- what every kernel starts with ----------------------------------------------------------------------------------


@cuda.jit(device=True)
def bind_rank_prims(fifo_in, fifo_out, ctr_in, ctr_out, abort, sync, state, op, scope, spins_before_check):
    """One thread of this rank's group on channel ``blockIdx.x``: its primitives over the channel's two connections
    (NCCL's ``Primitives`` constructor), as :func:`.ring_device_rank.ring_rank_all_reduce_kernel` binds them.

    ``state = (tail of next, head of mine, OK, 0)``: the counters only this rank writes say where the last call left
    off; ``return (conn, abort, sync, state, who)`` for :func:`.prims.connection_op`."""
    thread, nthreads, channel = int64(cuda.threadIdx.x), int64(cuda.blockDim.x), int64(cuda.blockIdx.x)
    at = dp._counter_at(channel, 0, 1)
    state[dp.SENT] = dp.load_volatile(ctr_out[TAIL], at)
    state[dp.RECEIVED] = dp.load_volatile(ctr_in[HEAD], at)
    state[dp.CODE] = dp.OK
    state[dp.STEPS] = 0
    conn = (fifo_in[channel], fifo_out[channel], ctr_in[TAIL], ctr_in[HEAD], at, ctr_out[TAIL], ctr_out[HEAD], at)
    return (conn, abort, sync, state, (thread, nthreads, int64(0), op, scope, spins_before_check))


@cuda.jit(device=True)
def copy_part(local, out, lo, hi):
    # One thread of a world of one rank: its elements of out[lo:hi] = local[lo:hi] (common.single_rank).
    for i in range(lo + cuda.threadIdx.x, hi, cuda.blockDim.x):
        out[i] = local[i]


@cuda.jit(device=True)
def report(status, state):
    # Thread 0: write the channel's (code, steps started) for the host.
    if cuda.threadIdx.x == 0:
        status[cuda.blockIdx.x, 0] = state[dp.CODE]
        status[cuda.blockIdx.x, 1] = state[dp.STEPS]


def _signature(dtype: str) -> str:
    # Every kernel takes the same arguments (broadcast and reduce use root, the reductions op), so one launch
    # serves them all.
    data, fifo = f"{dtype}[::1]", f"{dtype}[:, :, ::1]"
    return (
        f"void({data}, {data}, {fifo}, {fifo}, int64[:, ::1], int64[:, ::1], int32[::1], int64[:, ::1], "
        "int64, int64, int64, int64, int64, int64)"
    )


# -- the kernels: one rank's loop each, as in ring.py ---------------------------------------------------------------


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_rank_all_gather_kernel(local, out, fifo_in, fifo_out, ctr_in, ctr_out, abort, status, rank, nranks, op,
                                scope, spins_before_check, root):  # fmt: skip
    """One thread of this rank's group on channel ``blockIdx.x``: :func:`.ring.all_gather`,
    ``out[b*count:(b+1)*count] = local of rank b``; in place, ``local`` is this rank's block of ``out``.

    ``for each chunk [lo, hi) of this channel's part: copy_send(local lo:hi -> out block r);
    for j in 1 .. n-2: recv_copy_send(block r-j); recv(block r+1)``"""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    for i in range(cuda.threadIdx.x, _SYNC_WORDS, cuda.blockDim.x):
        sync[i] = int32(0)
    cuda.syncthreads()  # the group's barrier words are zero before it first meets
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_rank_prims(fifo_in, fifo_out, ctr_in, ctr_out, abort, sync, state, op, scope, spins_before_check)
    count, slot_elems = local.shape[0], fifo_in.shape[2]
    lo, hi = block_span(0, count, int64(cuda.gridDim.x), int64(cuda.blockIdx.x))
    if nranks == 1:
        copy_part(local, out, lo, hi)
        lo = hi
    for base in range(lo, hi, slot_elems):
        top = min(base + slot_elems, hi)
        dp.connection_op(prims, local, out, _COPY_SEND, base, top, rank * count + base)
        for j in range(1, nranks - 1):
            b = (rank - j + nranks) % nranks
            dp.connection_op(prims, local, out, _RECV_COPY_SEND, b * count + base, b * count + top, b * count + base)
        b = (rank + 1) % nranks
        dp.connection_op(prims, local, out, _RECV_COPY, b * count + base, b * count + top, b * count + base)
    report(status, state)


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_rank_reduce_scatter_kernel(local, out, fifo_in, fifo_out, ctr_in, ctr_out, abort, status, rank, nranks, op,
                                    scope, spins_before_check, root):  # fmt: skip
    """One thread of this rank's group on channel ``blockIdx.x``: :func:`.ring.reduce_scatter`,
    ``out = op over ranks of local[r*count:(r+1)*count]``; in place, ``out`` is this rank's block of ``local``.

    ``for each chunk [lo, hi) of this channel's part: send(block r-1); for j in 2 .. n-1:
    recv_reduce_send(block r-j); recv_reduce_copy(block r -> out lo:hi)``"""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    for i in range(cuda.threadIdx.x, _SYNC_WORDS, cuda.blockDim.x):
        sync[i] = int32(0)
    cuda.syncthreads()
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_rank_prims(fifo_in, fifo_out, ctr_in, ctr_out, abort, sync, state, op, scope, spins_before_check)
    count, slot_elems = out.shape[0], fifo_in.shape[2]
    lo, hi = block_span(0, count, int64(cuda.gridDim.x), int64(cuda.blockIdx.x))
    if nranks == 1:
        copy_part(local, out, lo, hi)
        lo = hi
    for base in range(lo, hi, slot_elems):
        top = min(base + slot_elems, hi)
        b = (rank - 1 + nranks) % nranks
        dp.connection_op(prims, local, out, _SEND, b * count + base, b * count + top, base)
        for j in range(2, nranks):
            b = (rank - j + nranks) % nranks
            dp.connection_op(prims, local, out, _RECV_REDUCE_SEND, b * count + base, b * count + top, base)
        dp.connection_op(prims, local, out, _RECV_REDUCE_COPY, rank * count + base, rank * count + top, base)
    report(status, state)


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_rank_broadcast_kernel(local, out, fifo_in, fifo_out, ctr_in, ctr_out, abort, status, rank, nranks, op,
                               scope, spins_before_check, root):  # fmt: skip
    """One thread of this rank's group on channel ``blockIdx.x``: :func:`.ring.broadcast`, a chain from ``root``
    (``local`` is read on the root only).

    ``position = (r - root) % n; for each chunk: copy_send (position 0), recv_copy_send (1 .. n-2), recv (n-1)``:
    the link from the last rank back to the root carries nothing."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    for i in range(cuda.threadIdx.x, _SYNC_WORDS, cuda.blockDim.x):
        sync[i] = int32(0)
    cuda.syncthreads()
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_rank_prims(fifo_in, fifo_out, ctr_in, ctr_out, abort, sync, state, op, scope, spins_before_check)
    slot_elems, position = fifo_in.shape[2], (rank - root + nranks) % nranks
    lo, hi = block_span(0, out.shape[0], int64(cuda.gridDim.x), int64(cuda.blockIdx.x))
    if nranks == 1:
        copy_part(local, out, lo, hi)
        lo = hi
    flags = _COPY_SEND if position == 0 else _RECV_COPY_SEND if position < nranks - 1 else _RECV_COPY
    for base in range(lo, hi, slot_elems):
        top = min(base + slot_elems, hi)
        dp.connection_op(prims, local, out, flags, base, top, base)
    report(status, state)


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_rank_reduce_kernel(local, out, fifo_in, fifo_out, ctr_in, ctr_out, abort, status, rank, nranks, op, scope,
                            spins_before_check, root):  # fmt: skip
    """One thread of this rank's group on channel ``blockIdx.x``: :func:`.ring.reduce`, a chain ending at ``root``
    (``out`` is written on the root only).

    ``position = (r - root - 1) % n; for each chunk: send (position 0), recv_reduce_send (1 .. n-2),
    recv_reduce_copy (n-1, the root)``"""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    for i in range(cuda.threadIdx.x, _SYNC_WORDS, cuda.blockDim.x):
        sync[i] = int32(0)
    cuda.syncthreads()
    state = cuda.local.array(_STATE_WORDS, int64)
    prims = bind_rank_prims(fifo_in, fifo_out, ctr_in, ctr_out, abort, sync, state, op, scope, spins_before_check)
    slot_elems, position = fifo_in.shape[2], (rank - root - 1 + nranks) % nranks  # the root is last
    lo, hi = block_span(0, local.shape[0], int64(cuda.gridDim.x), int64(cuda.blockIdx.x))
    if nranks == 1:
        copy_part(local, out, lo, hi)
        lo = hi
    flags = _SEND if position == 0 else _RECV_REDUCE_SEND if position < nranks - 1 else _RECV_REDUCE_COPY
    for base in range(lo, hi, slot_elems):
        top = min(base + slot_elems, hi)
        dp.connection_op(prims, local, out, flags, base, top, base)
    report(status, state)


KERNELS = {
    "all_gather": ring_rank_all_gather_kernel,
    "reduce_scatter": ring_rank_reduce_scatter_kernel,
    "broadcast": ring_rank_broadcast_kernel,
    "reduce": ring_rank_reduce_kernel,
}
"""Each collective's per-rank kernel, by the name the communicator gives it."""
