"""The ring all-reduce of :mod:`.ring` as one kernel: the same schedule, stepped on the device, not from Python.

This is the one-GPU world (as ``ncclCommInitAll`` drives several GPUs from one process): every rank's buffer is
one row of a 2-D array, and each rank is a group of ``group_threads`` threads of one block, so every rank is
resident while the others wait for it (on the simulator, a block's threads really run side by side). Block ``c``
of the grid is channel ``c``: it owns its part of the buffer (``Context.part``) and its own connections, so the
channels never wait for each other. One rank's loop, exactly :func:`.ring.all_reduce` (NCCL's ``runRing``)::

    for each round of n blocks of at most slot_elems elements (common.rounds):
        send                   block r-1                    reduce-scatter: start block r-1 with local
        recv_reduce_send       block r-j, j = 2 .. n-1      add local, pass it on
        recv_reduce_copy_send  block r                      every rank's part is in: final, keep it, pass it on
        recv_copy_send         block r-j, j = 1 .. n-2      all-gather: keep each final block, pass it on
        recv                   block r+1                    the last one only arrives

Every step moves one chunk through one FIFO slot (:mod:`nbcoll.comm.device.prims`). :func:`all_reduce_reference`
runs the same steps in NumPy, so its floating-point sums are added in the kernel's order.

Example (on the simulator; a GPU takes ``group_threads`` in multiples of 32)::

    ring = DeviceRing(3, slot_elems=4, group_threads=4)
    x = np.arange(15, dtype=np.int64).reshape(3, 5)
    ring.all_reduce(x)             # every row is now the column sums: [15, 18, 21, 24, 27]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int32, int64

from nbcoll import backend
from nbcoll.comm.algorithms.common import blocks, rounds
from nbcoll.comm.device import prims as dp
from nbcoll.comm.errors import CommAbortedError
from nbcoll.kernels.registry import register

DTYPES = (np.float32, np.float64, np.int32, np.int64)

# Array sizes the kernel allocates: module-level ints, which Numba reads as the constants an allocation needs.
_SYNC_WORDS = dp.MAX_GROUPS * dp.SYNC_WORDS
_STATE_WORDS = dp.STATE_WORDS


def all_reduce_reference(local: np.ndarray, op: str = "sum", slot_elems: int = 1024, nchannels: int = 1) -> np.ndarray:
    """Each row of the result is ``op`` over the rows of ``local``, folded in the kernel's order, step by step.

    Every rank's ``sent`` is the chunk it put in its next rank's slot at the step before; step ``j`` of rank ``r``
    handles the block the ring schedule gives it, exactly as :func:`ring_all_reduce_kernel` does.

    >>> x = np.arange(6.0).reshape(3, 2)
    >>> all_reduce_reference(x, "sum", slot_elems=1)
    array([[6., 9.],
           [6., 9.],
           [6., 9.]])
    """
    n, count = local.shape
    fold = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    out = local.copy()
    if n == 1:
        return out
    with np.errstate(all="ignore"):  # integers wrap as the kernel's do
        for lo, hi in blocks(0, count, nchannels):
            for block in rounds(hi - lo, n, slot_elems, start=lo):
                # Reduce-scatter: at step j rank r holds block r-1-j; step 0 sends local, then each adds local.
                sent = [local[r, slice(*block[(r - 1) % n])] for r in range(n)]
                for j in range(1, n):
                    span = [slice(*block[(r - 1 - j) % n]) for r in range(n)]
                    sent = [fold(local[r, span[r]], sent[(r - 1) % n]) for r in range(n)]
                for r in range(n):  # the last fold (j = n - 1) was block r: final
                    out[r, slice(*block[r])] = sent[r]
                # All-gather: each rank keeps what arrives and passes it on.
                for j in range(1, n):
                    sent = [sent[(r - 1) % n] for r in range(n)]
                    for r in range(n):
                        out[r, slice(*block[(r - j) % n])] = sent[r]
    return out


# -- the kernel -----------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def block_span(base, length, parts, b):
    # Block b of [base, base + length) cut into `parts` near-equal blocks, larger first (common.blocks).
    size, extra = length // parts, length % parts
    start = base + b * size + min(b, extra)
    return start, start + size + (1 if b < extra else 0)


@cuda.jit(device=True)
def copy_rank(local, out, rank, lo, hi, thread, nthreads):
    # One thread of a world of one rank: out[rank, i] = local[rank, i] for its elements of [lo, hi).
    for i in range(lo + thread, hi, nthreads):
        out[rank, i] = local[rank, i]


def _signature(dtype: str) -> str:
    data = f"{dtype}[:, ::1]"
    return (
        f"void({data}, {data}, {dtype}[:, :, :, ::1], int64[::1], int64[::1], int32[::1], int64[:, :, ::1], "
        "int64, int64, int64, int64)"
    )


@register(_signature("float32"), _signature("int32"))  # a float and an integer (whose sums widen to int64)
@cuda.jit
def ring_all_reduce_kernel(local, out, fifo, tail, head, abort, status, op, group_threads, scope, spins_before_check):
    """One thread: thread ``threadIdx.x % group_threads`` of rank ``threadIdx.x // group_threads``, on channel
    ``blockIdx.x``; the rank's loop is the module's schedule, and its thread 0 writes the rank's status."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    dp.clear_sync(sync)
    cuda.syncthreads()  # the only block-wide barrier: after it each rank meets only its own group
    nranks, count = local.shape[0], local.shape[1]
    rank = int64(cuda.threadIdx.x // group_threads)
    thread = int64(cuda.threadIdx.x % group_threads)
    if rank >= nranks:
        return
    channel, nchannels = int64(cuda.blockIdx.x), int64(cuda.gridDim.x)
    nxt = (rank + 1) % nranks
    slot_elems = fifo.shape[3]
    # The counters this rank alone writes tell it where the last call left off: they are never reset.
    state = cuda.local.array(_STATE_WORDS, int64)
    state[dp.SENT] = dp.load_volatile(tail, dp._counter_at(channel, nxt, nranks))
    state[dp.RECEIVED] = dp.load_volatile(head, dp._counter_at(channel, rank, nranks))
    state[dp.CODE] = dp.OK
    state[dp.STEPS] = 0
    ids = (channel, rank, nxt, thread, group_threads, rank, op, scope, spins_before_check)
    prims = (fifo, tail, head, abort, sync, state, ids)
    lo, hi = block_span(0, count, nchannels, channel)
    if nranks == 1:  # a world of one rank: the all-reduce is a copy (common.single_rank)
        copy_rank(local, out, rank, lo, hi, thread, group_threads)
        lo = hi
    per_round = nranks * slot_elems
    for base in range(lo, hi, per_round):  # common.rounds: n blocks of at most one slot each
        length = min(per_round, hi - base)
        # Reduce-scatter: block r-1 starts here; each step adds this rank's part and passes it on.
        b_lo, b_hi = block_span(base, length, nranks, (rank - 1 + nranks) % nranks)
        dp.send(prims, local, out, b_lo, b_hi)
        for j in range(2, nranks):
            b_lo, b_hi = block_span(base, length, nranks, (rank - j + nranks) % nranks)
            dp.recv_reduce_send(prims, local, out, b_lo, b_hi)
        # Block r arrives with every other rank's part: add ours, and it is final.
        b_lo, b_hi = block_span(base, length, nranks, rank)
        dp.recv_reduce_copy_send(prims, local, out, b_lo, b_hi)
        # All-gather: pass on each final block, keeping a copy.
        for j in range(1, nranks - 1):
            b_lo, b_hi = block_span(base, length, nranks, (rank - j + nranks) % nranks)
            dp.recv_copy_send(prims, local, out, b_lo, b_hi)
        b_lo, b_hi = block_span(base, length, nranks, (rank + 1) % nranks)
        dp.recv(prims, local, out, b_lo, b_hi)
    if thread == 0:
        status[channel, rank, 0] = state[dp.CODE]
        status[channel, rank, 1] = state[dp.STEPS]


# -- the host side: the connections, allocated once and never reset ---------------------------------------------


class DeviceRing:
    """The FIFOs, counters and abort word of a one-GPU world's ring, and the launch of its all-reduce.

    ``nranks`` ranks, ``nchannels`` channels (blocks), each connection a FIFO of ``steps`` slots of
    ``slot_elems`` elements (one FIFO per dtype, made on first use). ``group_threads`` threads per rank
    (a multiple of 32 on a GPU, which names a barrier per rank; 4 by default on the simulator, whose threads are
    costly). ``scope`` is ``"gpu"`` or ``"system"``: the fence before each counter store.

    >>> ring = DeviceRing(2, slot_elems=4)
    >>> ring.nranks, ring.steps, ring.tail.shape
    (2, 8, (32,))
    """

    def __init__(self, nranks: int, *, slot_elems: int = 1024, steps: int = 8, nchannels: int = 1,
                 group_threads: int | None = None, scope: str = "gpu") -> None:  # fmt: skip
        on_gpu = not backend.is_simulator()
        if group_threads is None:
            group_threads = max(32, min(256, 1024 // max(nranks, 1) // 32 * 32)) if on_gpu else 4
        if not 1 <= nranks <= dp.MAX_GROUPS:
            raise ValueError(f"nranks: expected 1 to {dp.MAX_GROUPS} ranks in one block, got {nranks}")
        for name, value in (("slot_elems", slot_elems), ("steps", steps), ("nchannels", nchannels)):
            if value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value}")
        if group_threads < 1 or nranks * group_threads > 1024 or (on_gpu and group_threads % 32):
            raise ValueError(f"group_threads: expected {'a multiple of 32' if on_gpu else 'at least 1'} with "
                             f"nranks * group_threads <= 1024, got {group_threads} for {nranks} ranks")  # fmt: skip
        if scope not in dp.SCOPES:
            raise ValueError(f"scope: expected one of {', '.join(dp.SCOPES)}, got {scope!r}")
        self.nranks, self.slot_elems, self.steps, self.nchannels = nranks, slot_elems, steps, nchannels
        self.group_threads, self.scope = group_threads, scope
        words = nchannels * nranks * dp.COUNTER_STRIDE
        self.tail = cuda.to_device(np.zeros(words, np.int64))
        self.head = cuda.to_device(np.zeros(words, np.int64))
        # The host writes the abort word while a kernel runs: mapped memory on a GPU, read with volatile loads.
        self.abort_word = cuda.mapped_array(1, np.int32) if on_gpu else cuda.to_device(np.zeros(1, np.int32))
        self.abort_word[0] = 0
        self._fifos: dict[np.dtype, Any] = {}

    def fifo(self, dtype: Any) -> Any:
        """Every rank's incoming FIFO of ``dtype`` elements, ``[channel, rank, slot, i]``.

        >>> DeviceRing(2, slot_elems=4, steps=2).fifo(np.float32).shape
        (1, 2, 2, 4)
        """
        dtype = np.dtype(dtype)
        if dtype not in self._fifos:
            shape = (self.nchannels, self.nranks, self.steps, self.slot_elems)
            self._fifos[dtype] = cuda.to_device(np.zeros(shape, dtype))
        return self._fifos[dtype]

    def abort(self) -> None:
        """Set the abort word: every rank still spinning returns within ``spins_before_check`` spins.

        >>> ring = DeviceRing(2, slot_elems=4)
        >>> ring.abort(); int(ring.abort_word[0])
        1
        """
        self.abort_word[0] = 1

    def launch(
        self,
        local: Any,
        out: Any,
        op: str = "sum",
        spins_before_check: int = dp.SPINS_BEFORE_CHECK_ABORT,
        ranks_started: int | None = None,
    ) -> np.ndarray:
        """Run the kernel on device arrays ``local`` and ``out`` (``nranks`` rows; ``out`` may be ``local``) and
        return the status, ``[channel, rank] = (code, steps started)``. ``ranks_started`` launches the groups of
        only so many ranks (a test of a peer that never comes).

        >>> ring = DeviceRing(2, slot_elems=4)
        >>> x = cuda.to_device(np.ones((2, 3), np.float32))
        >>> ring.launch(x, x)[0].tolist()         # (code, steps): send, recv_reduce_copy_send, recv
        [[0, 3], [0, 3]]
        """
        if op not in dp.OPS:
            raise ValueError(f"op: expected one of {', '.join(dp.OPS)}, got {op!r}")
        if local.ndim != 2 or local.shape[0] != self.nranks or out.shape != local.shape or out.dtype != local.dtype:
            raise ValueError(f"local, out: expected two arrays of shape ({self.nranks}, count) and one dtype, got "
                             f"{local.shape} {local.dtype} and {out.shape} {out.dtype}")  # fmt: skip
        if np.dtype(local.dtype) not in [np.dtype(t) for t in DTYPES]:
            raise ValueError(f"local: expected one of float32, float64, int32, int64, got {local.dtype}")
        status = cuda.to_device(np.full((self.nchannels, self.nranks, 2), dp.RUNNING, np.int64))
        ranks = self.nranks if ranks_started is None else ranks_started
        args = (dp.OPS[op], self.group_threads, dp.SCOPES[self.scope], spins_before_check)
        ring_all_reduce_kernel[self.nchannels, ranks * self.group_threads](
            local, out, self.fifo(local.dtype), self.tail, self.head, self.abort_word, status, *args
        )
        return status.copy_to_host()

    def all_reduce(self, local: np.ndarray, out: np.ndarray | None = None, op: str = "sum") -> np.ndarray:
        """``out[r] = op over ranks of local[r]`` for host arrays (``out`` defaults to ``local``: in place);
        raises :class:`~nbcoll.comm.errors.CommAbortedError` naming each rank that stopped, where and why.

        >>> ring = DeviceRing(3, slot_elems=2)
        >>> ring.all_reduce(np.arange(6, dtype=np.int64).reshape(3, 2)).tolist()
        [[6, 9], [6, 9], [6, 9]]
        """
        out = local if out is None else out
        d_local = cuda.to_device(local)
        d_out = d_local if out is local else cuda.to_device(out)
        status = self.launch(d_local, d_out, op)
        raise_for_status(status)
        d_out.copy_to_host(out)
        return out


def raise_for_status(status: np.ndarray, call: str = "all_reduce") -> None:
    """Raise :class:`~nbcoll.comm.errors.CommAbortedError` when a rank of a channel did not finish, naming it, the
    peer it waited for and the step (``status[c, r] = (code, steps started)``, as :meth:`DeviceRing.launch` gives);
    ``call`` is the collective the message names.

    >>> ok = np.zeros((1, 2, 2), np.int64)
    >>> raise_for_status(ok)                      # nothing to say
    >>> stuck = np.array([[[dp.ABORTED_RECV, 2], [dp.RUNNING, 0]]])
    >>> raise_for_status(stuck)
    Traceback (most recent call last):
        ...
    nbcoll.comm.errors.CommAbortedError: all_reduce (ring, device): the abort word was set; rank 0 (channel 0) \
waited for its previous rank's chunk (rank 1) at step 2; rank 1 (channel 0) never ran
    """
    why = {dp.RUNNING: "never ran", dp.ABORTED_RECV: "waited for its previous rank's chunk",
           dp.ABORTED_SEND: "waited for a free slot of its next rank"}  # fmt: skip
    nranks = status.shape[1]
    stopped = [
        f"rank {r} (channel {c}) {why[int(code)]}"
        + (f" (rank {(r + (-1 if code == dp.ABORTED_RECV else 1)) % nranks}) at step {int(step)}" if code > 0 else "")
        for c, row in enumerate(status)
        for r, (code, step) in enumerate(row)
        if code != dp.OK
    ]
    if stopped:
        raise CommAbortedError(f"{call} (ring, device): the abort word was set; " + "; ".join(stopped))
