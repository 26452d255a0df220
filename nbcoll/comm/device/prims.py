"""NCCL's simple-protocol primitives (``src/device/prims_simple.h``) as Numba CUDA device functions.

A connection from a sender to a receiver is a FIFO of ``steps`` slots of ``slot_elems`` elements in the
receiver's memory and two counters that only grow and are never reset, so a second call (or a replayed graph)
simply carries on counting::

    tail   written only by the sender:   how many steps it has posted into the receiver's FIFO
    head   written only by the receiver: how many steps it has consumed (each one frees its slot again)

Step ``s`` lives in slot ``s % steps``. The sender of step ``s`` waits for ``head >= s + 1 - steps`` (a free slot),
the receiver of step ``s`` for ``tail >= s + 1`` (the chunk is there). Each rank is a group of threads; one
thread of the group polls, and a barrier of the group publishes what it saw, as NCCL does. Data are written
before the counter that announces them: the group's barrier, then a fence of the connection's scope, then the
store (NCCL's ``postPeer``: ``fence.acq_rel.sys`` then ``st.relaxed.sys``). The fence is cumulative: it orders
every write the barrier made this thread see, the other threads' slot writes included.

The functions, and what they are in NCCL:

============================= ========================================================================
``load_volatile``             the spin's load of ``waitPeer`` (``ld.volatile.global``, ``op128.h``)
``store_volatile``            the counter store of ``postPeer`` (``st.volatile.global``)
``fence``                     ``__threadfence()`` (one GPU) or ``__threadfence_system()`` (several GPUs or
                              host-mapped memory): the connection's scope, :data:`SCOPE_GPU` or
                              :data:`SCOPE_SYSTEM`, an argument of every kernel
``group_sync``                ``barrier()``: ``barrier.sync 1 + group, nthreads``, a named barrier per rank
``wait_peer``                 ``waitPeer``: one thread spins on a counter, checks the abort word every
                              ``spins_before_check`` spins (``NCCL_SPINS_BEFORE_CHECK_ABORT``) and gives up
                              when it is set
``post_peer``                 ``postPeer``: fence, then store the counter
``generic_op``                ``genericOp``: wait, move one chunk (receive, fold, copy out, send), post
``send`` ... ``copy_send``    ``send``, ``recv``, ``recvReduceSend``, ``recvCopySend``, ``recvReduceCopy``,
                              ``recvReduceCopySend``, ``copySend``: ``genericOp`` with their flags
============================= ========================================================================

numba-cuda has no volatile or acquire load: its cache-hint loads are inline assembly without side effects, which
the compiler may hoist out of a spin. On a GPU the leaves are therefore intrinsics emitting inline PTX marked
with side effects and a memory clobber (:func:`_ld_volatile`, :func:`_st_volatile`, :func:`_bar_sync`). The
simulator has no inline PTX, so there the same device functions get plain loads and stores (Python threads see
each other's writes), a barrier of atomics in shared memory, and a spin that lets the other Python threads run.
Which leaves are used is decided once, at import, from the device backend (:mod:`nbcoll.comm.device.leaves`).

A rank's primitives are one tuple, built once by the kernel (NCCL's ``Primitives`` constructor)::

    prims = (fifo, tail, head, abort, sync, state, ids)
    fifo   [channel, rank, slot, i]   every rank's incoming FIFO: what its "prev" sends it
    tail   [counter_at(c, r, n)]      steps posted into rank r's FIFO of channel c (by its prev)
    head   [counter_at(c, r, n)]      steps rank r has consumed from that FIFO
    abort  [0]                        set by the host: stop spinning and return a failure code
    sync   shared, SYNC_WORDS per group: the group's barrier and the status its poller publishes
    state  [sent, received, code, steps]: this thread's copy of the rank's step counts (all threads keep them
                                      alike), its sticky failure code, and the steps it has started
    ids    (channel, rank, next, thread in group, threads in group, group, op, scope, spins_before_check)

Once a primitive fails (``state[CODE] != OK``) every later one does nothing, so a kernel reads as the schedule
alone and still returns when a peer never comes.
"""

from __future__ import annotations

from numba import cuda, int32

from nbcoll.comm.device.leaves import (  # noqa: F401  (SYNC_WORDS, _STATUS and the leaves: importable from here)
    _STATUS,
    SYNC_WORDS,
    load_volatile,
    spin_pause,
    store_volatile,
)
from nbcoll.comm.device.leaves import _barrier as _barrier

# What a primitive does (NCCL's genericOp template arguments); a primitive's name lists its flags.
RECV, REDUCE, COPY, SEND = 1, 2, 4, 8

# The reduction ops, as kernel arguments.
OP_SUM, OP_PROD, OP_MAX, OP_MIN = 0, 1, 2, 3
OPS = {"sum": OP_SUM, "prod": OP_PROD, "max": OP_MAX, "min": OP_MIN}

# Scopes of a connection: which fence orders the data before the counter.
SCOPE_GPU, SCOPE_SYSTEM = 0, 1
SCOPES = {"gpu": SCOPE_GPU, "system": SCOPE_SYSTEM}

# Status codes a rank ends with (status[channel, rank, 0]); the host writes RUNNING before a launch, so a rank
# whose group never ran still says so afterwards.
RUNNING, OK, ABORTED_RECV, ABORTED_SEND = -1, 0, 1, 2

SPINS_BEFORE_CHECK_ABORT = 10_000
"""Spins between two reads of the abort word (NCCL's ``NCCL_SPINS_BEFORE_CHECK_ABORT``)."""

COUNTER_STRIDE = 16
"""int64 words from one counter to the next (128 bytes): two counters never share a cache line."""

MAX_GROUPS = 15
"""Ranks in one block: named barriers 1 to 15 (barrier 0 is ``syncthreads``)."""


# Indices into a rank's state array.
SENT, RECEIVED, CODE, STEPS = 0, 1, 2, 3
STATE_WORDS = 4


def counter_at(channel: int, rank: int, nranks: int) -> int:
    """Where rank ``rank``'s counter of channel ``channel`` is in a flat head or tail array.

    >>> counter_at(1, 2, 4), COUNTER_STRIDE * 6
    (96, 96)
    """
    return (channel * nranks + rank) * COUNTER_STRIDE


_counter_at = cuda.jit(device=True)(counter_at)


# -- the device primitives ----------------------------------------------------------------------------------


@cuda.jit(device=True)
def fence(scope):
    # One thread: order its earlier writes (and those the group's barrier showed it) before its later ones.
    if scope == SCOPE_SYSTEM:
        cuda.threadfence_system()  # membar.sys: another GPU or the host reads the memory
    else:
        cuda.threadfence()  # membar.gl: every reader is on this GPU


@cuda.jit(device=True)
def group_sync(sync, group, nthreads):
    # Every thread of the group: wait until all ``nthreads`` of them are here (NCCL's barrier()).
    _barrier(sync, group, nthreads)


@cuda.jit(device=True)
def apply_op(op, a, b):
    # One thread: one element of a reduction.
    if op == OP_SUM:
        return a + b
    if op == OP_PROD:
        return a * b
    if op == OP_MAX:
        return a if a >= b else b
    return a if a <= b else b


@cuda.jit(device=True)
def wait_peer(counter, at, target, abort, spins_before_check):
    """One thread: spin until ``counter[at] >= target``; return True, or False once the abort word is set.

    ``while load_volatile(counter[at]) < target: every spins_before_check spins: if abort[0]: return False``
    """
    spins = 0
    while load_volatile(counter, at) < target:
        spin_pause()
        spins += 1
        if spins >= spins_before_check:
            if load_volatile(abort, 0) != 0:
                return False
            spins = 0
    return True


@cuda.jit(device=True)
def post_peer(counter, at, value, scope):
    # One thread, after the group's barrier: make the group's writes visible, then announce them.
    fence(scope)
    store_volatile(counter, at, value)


@cuda.jit(device=True)
def generic_op(prims, local, out, flags, lo, hi, out_lo):
    """Every thread of a rank's group: one chunk ``[lo, hi)`` through one hop of a one-block world, as ``flags``
    say: :func:`connection_op` on this rank's row and its two connections (slots ``[channel, rank]`` in, ``[channel,
    next]`` out)."""
    fifo, tail, head, abort, sync, state, ids = prims
    channel, rank, nxt, thread, nthreads, group, op, scope, spins = ids
    nranks = fifo.shape[1]
    conn = (fifo[channel, rank], fifo[channel, nxt], tail, head, _counter_at(channel, rank, nranks),
            tail, head, _counter_at(channel, nxt, nranks))  # fmt: skip
    who = (thread, nthreads, group, op, scope, spins)
    connection_op((conn, abort, sync, state, who), local[rank], out[rank], flags, lo, hi, out_lo)


@cuda.jit(device=True)
def connection_op(prims, local, out, flags, lo, hi, out_lo):
    """Every thread of a rank's group: one chunk ``[lo, hi)`` of the rows ``local``/``out`` through one hop.

    ``prims = (conn, abort, sync, state, who)``: ``conn = (slots_in, slots_out, tail_in, head_in, at_in, tail_out,
    head_out, at_out)`` is the FIFO ``[slot, i]`` this rank receives into with its counters ``tail_in[at_in]`` and
    ``head_in[at_in]``, and the next rank's FIFO with ``tail_out[at_out]``, ``head_out[at_out]`` (NCCL's
    ``recvConn`` and ``sendConn``: each may be in another process's memory); ``who = (thread in group, threads in
    group, group, op, scope, spins_before_check)``.

    ``wait (thread 0: the chunk from prev has arrived, a slot of next is free) -> barrier ->
    for i in my elements: v = local[i] | slot_in[i] | op(local[i], slot_in[i]); out[out_lo + i] = v (COPY);
    slot_out[i] = v (SEND) -> barrier -> thread 0: post tail of next (SEND), head of this rank (RECV)``
    """
    conn, abort, sync, state, who = prims
    slots_in, slots_out, tail_in, head_in, at_in, tail_out, head_out, at_out = conn
    thread, nthreads, group, op, scope, spins = who
    if state[CODE] != OK:
        return
    state[STEPS] += 1
    nsteps = slots_in.shape[0]
    sent, received = state[SENT], state[RECEIVED]
    if thread == 0:
        code = OK
        if flags & RECV and not wait_peer(tail_in, at_in, received + 1, abort, spins):
            code = ABORTED_RECV
        if code == OK and flags & SEND:
            if not wait_peer(head_out, at_out, sent + 1 - nsteps, abort, spins):
                code = ABORTED_SEND
        fence(scope)  # after the spin's load: the peer's data are read only after its counter (acquire)
        sync[group * SYNC_WORDS + _STATUS] = code
    group_sync(sync, group, nthreads)
    code = sync[group * SYNC_WORDS + _STATUS]
    if code != OK:
        state[CODE] = code
        return
    slot_in, slot_out = received % nsteps, sent % nsteps
    for i in range(thread, hi - lo, nthreads):
        if flags & RECV:
            v = slots_in[slot_in, i]
            if flags & REDUCE:
                v = apply_op(op, local[lo + i], v)
        else:
            v = local[lo + i]
        if flags & COPY:
            out[out_lo + i] = v
        if flags & SEND:
            slots_out[slot_out, i] = v
    group_sync(sync, group, nthreads)  # every slot read and written before thread 0 posts
    if thread == 0:
        if flags & SEND:
            post_peer(tail_out, at_out, sent + 1, scope)
        if flags & RECV:
            post_peer(head_in, at_in, received + 1, scope)
    if flags & SEND:
        state[SENT] = sent + 1
    if flags & RECV:
        state[RECEIVED] = received + 1


@cuda.jit(device=True)
def send(prims, local, out, lo, hi):
    # slot(next) = local[lo:hi]
    generic_op(prims, local, out, SEND, lo, hi, lo)


@cuda.jit(device=True)
def recv(prims, local, out, lo, hi):
    # out[lo:hi] = slot(prev)
    generic_op(prims, local, out, RECV | COPY, lo, hi, lo)


@cuda.jit(device=True)
def recv_reduce_send(prims, local, out, lo, hi):
    # slot(next) = op(local[lo:hi], slot(prev))
    generic_op(prims, local, out, RECV | REDUCE | SEND, lo, hi, lo)


@cuda.jit(device=True)
def recv_copy_send(prims, local, out, lo, hi):
    # out[lo:hi] = slot(prev); slot(next) = out[lo:hi]
    generic_op(prims, local, out, RECV | COPY | SEND, lo, hi, lo)


@cuda.jit(device=True)
def recv_reduce_copy(prims, local, out, lo, hi):
    # out[lo:hi] = op(local[lo:hi], slot(prev))
    generic_op(prims, local, out, RECV | REDUCE | COPY, lo, hi, lo)


@cuda.jit(device=True)
def recv_reduce_copy_send(prims, local, out, lo, hi):
    # out[lo:hi] = op(local[lo:hi], slot(prev)); slot(next) = out[lo:hi]
    generic_op(prims, local, out, RECV | REDUCE | COPY | SEND, lo, hi, lo)


@cuda.jit(device=True)
def copy_send(prims, local, out, lo, hi):
    # out[lo:hi] = local[lo:hi]; slot(next) = local[lo:hi]
    generic_op(prims, local, out, COPY | SEND, lo, hi, lo)


@cuda.jit(device=True)
def clear_sync(sync):
    # Every thread of the block, before any group meets: zero the shared barrier words (then syncthreads).
    for i in range(cuda.threadIdx.x, MAX_GROUPS * SYNC_WORDS, cuda.blockDim.x):
        sync[i] = int32(0)
