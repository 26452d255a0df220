"""The ring all-reduce of :mod:`.ring_device` as one kernel per rank: the NCCL model, one process per rank.

In :mod:`.ring_device` one launch holds the whole world. Here each rank's process launches its own kernel, which
holds only this rank: one block per channel, every thread of the block in the rank's group. What the block
touches, per channel (NCCL's ``recvConn`` and ``sendConn``)::

    fifo_in[channel]   [slot, i]  this rank's FIFO, in its own memory; its previous rank writes into it
    fifo_out[channel]  [slot, i]  the next rank's FIFO, mapped from that process (CUDA IPC, or POSIX shm)
    ctr_in[0|1, at]               tail (written by prev) and head (written here) of fifo_in
    ctr_out[0|1, at]              tail (written here) and head (written by next) of fifo_out
    abort[0]                      set by this rank's host watchdog; every spin reads it every so many spins

``at = counter_at(channel, 0, 1)``: one counter per channel, 128 bytes apart. The schedule is
:func:`.ring_device.ring_all_reduce_kernel`'s (NCCL's ``runRing``), so :func:`rank_reference` is
:func:`.ring_device.all_reduce_reference`'s row of this rank: the same chunks, added in the same order.

Example (each rank's process, once its connections are mapped; :mod:`nbcoll.comm.device_collective` does it)::

    ring_rank_all_reduce_kernel[nchannels, threads](x, x, fifo_in, fifo_out, ctr_in, ctr_out, abort, status,
                                                    rank, nranks, OP_SUM, SCOPE_SYSTEM, spins)
"""

from __future__ import annotations

import numpy as np
from numba import cuda, int32, int64

from nbcoll.comm.algorithms.ring_device import all_reduce_reference, block_span
from nbcoll.comm.device import prims as dp
from nbcoll.kernels.registry import register

TAIL, HEAD = 0, 1
"""Rows of a rank's counter array: the tail and the head of the connection into it."""

# Sizes the kernel allocates: module-level ints, which Numba reads as constants.
_SYNC_WORDS = dp.SYNC_WORDS
_STATE_WORDS = dp.STATE_WORDS


def counter_words(nchannels: int) -> int:
    """Columns of a rank's counter array ``[TAIL|HEAD, ...]``: one counter per channel, a cache line apart.

    >>> counter_words(2) == 2 * 16
    True
    """
    return nchannels * dp.COUNTER_STRIDE


def rank_reference(inputs: np.ndarray, rank: int, op: str = "sum", slot_elems: int = 1024, nchannels: int = 1):
    """What :func:`ring_rank_all_reduce_kernel` leaves in rank ``rank``'s output, given every rank's input (rows).

    >>> x = np.arange(6.0).reshape(3, 2)
    >>> rank_reference(x, 1, slot_elems=1)
    array([6., 9.])
    """
    return all_reduce_reference(inputs, op, slot_elems, nchannels)[rank]


# -- the primitives over one rank's own two connections (the flags of prims.generic_op) ---------------------------


@cuda.jit(device=True)
def send(prims, local, out, lo, hi):
    # slot(next) = local[lo:hi]
    dp.connection_op(prims, local, out, dp.SEND, lo, hi, lo)


@cuda.jit(device=True)
def recv(prims, local, out, lo, hi):
    # out[lo:hi] = slot(prev)
    dp.connection_op(prims, local, out, dp.RECV | dp.COPY, lo, hi, lo)


@cuda.jit(device=True)
def recv_reduce_send(prims, local, out, lo, hi):
    # slot(next) = op(local[lo:hi], slot(prev))
    dp.connection_op(prims, local, out, dp.RECV | dp.REDUCE | dp.SEND, lo, hi, lo)


@cuda.jit(device=True)
def recv_copy_send(prims, local, out, lo, hi):
    # out[lo:hi] = slot(prev); slot(next) = out[lo:hi]
    dp.connection_op(prims, local, out, dp.RECV | dp.COPY | dp.SEND, lo, hi, lo)


@cuda.jit(device=True)
def recv_reduce_copy_send(prims, local, out, lo, hi):
    # out[lo:hi] = op(local[lo:hi], slot(prev)); slot(next) = out[lo:hi]
    dp.connection_op(prims, local, out, dp.RECV | dp.REDUCE | dp.COPY | dp.SEND, lo, hi, lo)


# -- the kernel -----------------------------------------------------------------------------------------------


def _signature(dtype: str) -> str:
    data, fifo = f"{dtype}[::1]", f"{dtype}[:, :, ::1]"
    return (
        f"void({data}, {data}, {fifo}, {fifo}, int64[:, ::1], int64[:, ::1], int32[::1], int64[:, ::1], "
        "int64, int64, int64, int64, int64)"
    )


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def ring_rank_all_reduce_kernel(local, out, fifo_in, fifo_out, ctr_in, ctr_out, abort, status, rank, nranks, op,
                                scope, spins_before_check):  # fmt: skip
    """One thread: thread ``threadIdx.x`` of this rank's group on channel ``blockIdx.x``; thread 0 polls, and
    writes the channel's ``status[channel] = (code, steps started)``.

    ``for each round of n blocks: send; (n-2) x recv_reduce_send; recv_reduce_copy_send; (n-2) x recv_copy_send;
    recv`` (NCCL's ``runRing``), each step one chunk through this rank's two connections."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    thread, nthreads = int64(cuda.threadIdx.x), int64(cuda.blockDim.x)
    for i in range(thread, _SYNC_WORDS, nthreads):
        sync[i] = int32(0)
    cuda.syncthreads()  # the group's barrier words are zero before it first meets
    channel, nchannels = int64(cuda.blockIdx.x), int64(cuda.gridDim.x)
    count, slot_elems = local.shape[0], fifo_in.shape[2]
    at = dp._counter_at(channel, 0, 1)
    # Only this rank writes its next's tail and its own head: they say where the last call left off.
    state = cuda.local.array(_STATE_WORDS, int64)
    state[dp.SENT] = dp.load_volatile(ctr_out[TAIL], at)
    state[dp.RECEIVED] = dp.load_volatile(ctr_in[HEAD], at)
    state[dp.CODE] = dp.OK
    state[dp.STEPS] = 0
    conn = (fifo_in[channel], fifo_out[channel], ctr_in[TAIL], ctr_in[HEAD], at, ctr_out[TAIL], ctr_out[HEAD], at)
    prims = (conn, abort, sync, state, (thread, nthreads, int64(0), op, scope, spins_before_check))
    lo, hi = block_span(0, count, nchannels, channel)
    if nranks == 1:  # a world of one rank: the all-reduce is a copy
        for i in range(lo + thread, hi, nthreads):
            out[i] = local[i]
        lo = hi
    per_round = nranks * slot_elems
    for base in range(lo, hi, per_round):
        length = min(per_round, hi - base)
        b_lo, b_hi = block_span(base, length, nranks, (rank - 1 + nranks) % nranks)
        send(prims, local, out, b_lo, b_hi)
        for j in range(2, nranks):
            b_lo, b_hi = block_span(base, length, nranks, (rank - j + nranks) % nranks)
            recv_reduce_send(prims, local, out, b_lo, b_hi)
        b_lo, b_hi = block_span(base, length, nranks, rank)
        recv_reduce_copy_send(prims, local, out, b_lo, b_hi)
        for j in range(1, nranks - 1):
            b_lo, b_hi = block_span(base, length, nranks, (rank - j + nranks) % nranks)
            recv_copy_send(prims, local, out, b_lo, b_hi)
        b_lo, b_hi = block_span(base, length, nranks, (rank + 1) % nranks)
        recv(prims, local, out, b_lo, b_hi)
    if thread == 0:
        status[channel, 0] = state[dp.CODE]
        status[channel, 1] = state[dp.STEPS]
