"""Signal pads: the barriers of a one-shot or two-shot all-reduce over registered buffers, as device functions.

A *signal pad* is one ``uint32`` word per (block, owner, sender): the word in which the sender tells the owner
"I have arrived". It is PyTorch SymmetricMemory's signalling (``symm_mem/CUDASymmetricMemory-inl.h``), and it
needs no counter that grows::

    put_signal(pad)    compare-and-swap 0 -> 1, retried while the pad is still 1 (the owner has not taken the
                       sender's previous signal yet); a release: what the sender wrote comes before it
    wait_signal(pad)   compare-and-swap 1 -> 0, retried until it succeeds; an acquire: what the owner reads
                       after it comes after the sender's writes

Every put is taken by exactly one wait, so after a barrier every pad is 0 again: the next call, or a replayed
CUDA graph, starts from the same zeros with nothing to reset.

``barrier`` is PyTorch's ``sync_remote_blocks``: a rank puts a signal into its own slot of every rank's pad
(itself included, so that a world of one rank needs no special case), then waits on every slot of its own::

    for p in ranks: put_signal(pads[block, p, me])
    for p in ranks: wait_signal(pads[block, me, p])

Ordering. numba-cuda's ``cuda.atomic.cas`` is a *relaxed* atomic at device scope, with no order of its own. The
release and the acquire are therefore written as the PTX memory model's fence patterns: a fence of the
connection's scope, then the relaxed CAS that succeeds, is a release (``fence; atom``); the relaxed CAS that
succeeds, then a fence, is an acquire (``atom; fence``). A put that succeeds is the write a wait's successful CAS
reads, so the sender's release pattern synchronises with the owner's acquire pattern, and every write that comes
before the sender's fence (the buffer it filled) happens before every read that comes after the owner's fence
(the owner reading that buffer). The fences are cumulative, so a write of another thread of the group that the
group's barrier ordered before the fence is covered as well: one thread of a rank signals for its whole group,
as in :mod:`.prims`. ``threadfence`` (``membar.gl``) is the fence where every peer is on this GPU,
``threadfence_system`` (``membar.sys``) where a peer is another GPU or the host.

Every spin is bounded by the abort word, read every ``spins_before_check`` spins (as :func:`.prims.wait_peer`):
a put or a wait whose peer never comes returns False once the host has set it, and the barrier reports which
peer it was waiting for. An aborted barrier leaves pads that are not 0; the host clears them before the next
call (:meth:`nbcoll.comm.algorithms.direct_device.DeviceSymmetricMemory.reset`).

On the simulator ``cuda.atomic.cas`` is a lock around a load and a store, which makes it atomic between the
Python threads that run a simulated block: exactly the one-process world, whose ranks are thread groups of one
block.
"""

from __future__ import annotations

from numba import cuda, uint32

from nbcoll.comm.device import prims as dp

# What a barrier ends with (state[CODE], and the status the host reads); OK and RUNNING as in prims.
OK, RUNNING = dp.OK, dp.RUNNING
ABORTED_WAIT = 1
"""The barrier waited for a peer's signal, which never came."""
ABORTED_PUT = 2
"""The barrier waited for a peer to take this rank's previous signal, which it never did."""

# Indices into a rank's state array: its sticky code, the barriers it has started, the peer it was waiting for.
CODE, BARRIERS, PEER = 0, 1, 2
STATE_WORDS = 3


def pad_at(block: int, owner: int, sender: int, nranks: int) -> int:
    """Where ``sender``'s signal to ``owner`` for block ``block`` is in a flat array of pads.

    >>> pad_at(1, 2, 0, 3)                     # block 1, owner 2, sender 0 of 3 ranks
    15
    """
    return (block * nranks + owner) * nranks + sender


_pad_at = cuda.jit(device=True)(pad_at)


@cuda.jit(device=True)
def put_signal(pads, at, abort, scope, spins_before_check):
    """One thread: turn ``pads[at]`` from 0 to 1, after this thread's writes; False once the abort word is set.

    ``fence(scope); while cas(pads[at], 0, 1) != 0: every spins_before_check spins: if abort[0]: return False``
    (PyTorch's ``put_signal<release>``).
    """
    dp.fence(scope)  # release: the data come before the signal (see the module's docstring)
    spins = 0
    while cuda.atomic.cas(pads, at, uint32(0), uint32(1)) != 0:  # an atomic: re-read on every turn of the loop
        dp.spin_pause()
        spins += 1
        if spins >= spins_before_check:
            if dp.load_volatile(abort, 0) != 0:
                return False
            spins = 0
    return True


@cuda.jit(device=True)
def wait_signal(pads, at, abort, scope, spins_before_check):
    """One thread: wait until ``pads[at]`` is 1 and turn it back to 0; False once the abort word is set.

    ``while cas(pads[at], 1, 0) != 1: every spins_before_check spins: if abort[0]: return False; fence(scope)``
    (PyTorch's ``wait_signal<acquire>``).
    """
    spins = 0
    while cuda.atomic.cas(pads, at, uint32(1), uint32(0)) != 1:
        dp.spin_pause()
        spins += 1
        if spins >= spins_before_check:
            if dp.load_volatile(abort, 0) != 0:
                return False
            spins = 0
    dp.fence(scope)  # acquire: what this thread (and, after the group's barrier, its group) reads comes after
    return True


@cuda.jit(device=True)
def barrier(pads, abort, sync, state, ids):
    """Every thread of a rank's group: meet every rank of this block's world; sets ``state[CODE]`` when it fails.

    ``group barrier -> thread 0: for p: put_signal(pads[block, p, me]); for p: wait_signal(pads[block, me, p])
    -> thread 0 publishes its code -> group barrier -> every thread takes the code``
    (PyTorch's ``sync_remote_blocks``, one thread signalling for its group as NCCL's primitives do).
    ``ids = (block, rank, nranks, thread, threads in group, scope, spins_before_check)``; the group's number is
    its rank. Once a barrier has failed, every later one does nothing.
    """
    block, rank, nranks, thread, nthreads, scope, spins = ids
    if state[CODE] != OK:
        return
    state[BARRIERS] += 1
    dp.group_sync(sync, rank, nthreads)  # every write of the group comes before thread 0's release fence
    if thread == 0:
        code = OK
        for peer in range(nranks):
            if not put_signal(pads, _pad_at(block, peer, rank, nranks), abort, scope, spins):
                code = ABORTED_PUT
                state[PEER] = peer
                break
        if code == OK:
            for peer in range(nranks):
                if not wait_signal(pads, _pad_at(block, rank, peer, nranks), abort, scope, spins):
                    code = ABORTED_WAIT
                    state[PEER] = peer
                    break
        sync[rank * dp.SYNC_WORDS + dp._STATUS] = code
    dp.group_sync(sync, rank, nthreads)  # the acquire of thread 0 covers the group's reads after this barrier
    state[CODE] = sync[rank * dp.SYNC_WORDS + dp._STATUS]
