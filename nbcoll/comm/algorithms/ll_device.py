"""The one-shot LL collectives of :mod:`nbcoll.comm.ll` as one kernel: each rank writes LL lines, each rank polls.

The host's LL all-reduce writes a rank's words as lines of the round, then polls every peer's lines until each
carries the round and folds the words in rank order; its all-gather copies each peer's words into its block. Here
the same round runs inside one kernel, in the one-GPU world (as :mod:`.ring_device`): every rank's buffer is a row
of a 2-D array and each rank is a group of ``group_threads`` threads of ONE block, so every writer is resident
while a reader waits for it. Every rank has an *inbox* of lines per writer (:func:`inbox_at`); one thread's work,
for the values ``e = thread, thread + group_threads, ...`` of its rank ``r``::

    for e: for every peer p:  ll_store(inbox(p, from r), e, local[r, e], flag)     write: a writer never waits
    all-reduce:  for e: out[r, e] = op(value of rank 0, ..., of rank n-1)          rank order: the same bits
                        (rank r's own value from local, a peer's by ll_load_until on inbox(r, from p))
    all-gather:  for p, e: out[r, p * count + e] = value of rank p                 (its own block from local)

No barrier at all: a thread polls only the lines it needs and never waits for another thread of its rank, as
NCCL's LL threads each read their own lines (``prims_ll.h``; PyTorch SymmetricMemory's one-shot all-reduce is the
same read of every peer, behind signal pads instead of flags). Each thread reports to its rank's status with
atomics: ``status[r] = (code, peer)``, the code the worst of its threads' (``RUNNING`` until a thread of the rank
finishes; ``ABORTED_RECV`` once one gave up) and the lowest peer one gave up on.

Calls follow one another in one stream, so a call's reads are over before the next call writes: one inbox
suffices. Each call is a round, numbered by :class:`DeviceLL`'s counter, and its lines carry that round's flag
(1, 2, ..., 2**32 - 1, then 1 again: :func:`nbcoll.kernels.ll.wrapped`, never 0, which a line never written holds),
so no call clears the lines: a line of an older round, even of a call that was aborted halfway, has another flag.
A 4-byte value is one line, an 8-byte one two (:mod:`nbcoll.comm.device.ll`). Grid: one block (LL serves small
messages; the simple protocol's ring spreads large ones over channels).

Example (on the simulator; every row of the all-reduce is the column sums)::

    ll = DeviceLL(3, max_bytes=256)
    ll.all_reduce(np.arange(15, dtype=np.int32).reshape(3, 5))      # rows [15, 18, 21, 24, 27]
    ll.all_gather(np.arange(6, dtype=np.float32).reshape(3, 2))     # every row [0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int64, uint32

from nbcoll import backend
from nbcoll.comm.device import ll
from nbcoll.comm.device import prims as dp
from nbcoll.comm.errors import CommAbortedError
from nbcoll.kernels.ll import WORD_BYTES, wrapped
from nbcoll.kernels.registry import register

DTYPES = (np.float32, np.float64, np.int32, np.int64)
COLLECTIVES = ("all_reduce", "all_gather")


def all_reduce_reference(local: np.ndarray, op: str = "sum") -> np.ndarray:
    """Each row of the result is ``op`` over the rows of ``local``, folded in rank order as every rank of
    :func:`ll_all_reduce_kernel` folds them: ``acc = local[0]; for p in 1 .. n-1: acc = op(acc, local[p])``.

    >>> all_reduce_reference(np.array([[1, 2], [3, 4], [5, 6]], np.int32))
    array([[ 9, 12],
           [ 9, 12],
           [ 9, 12]], dtype=int32)
    """
    fold = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    acc = local[0].copy()
    with np.errstate(all="ignore"):  # integers wrap as the kernel's do
        for p in range(1, local.shape[0]):
            acc = fold(acc, local[p])
    return np.broadcast_to(acc, local.shape).copy()


def all_gather_reference(local: np.ndarray) -> np.ndarray:
    """Each row of the result is every rank's row in rank order: ``out[r, p * count + e] = local[p, e]``.

    >>> all_gather_reference(np.array([[1.5], [2.5]], np.float32))
    array([[1.5, 2.5],
           [1.5, 2.5]], dtype=float32)
    """
    return np.broadcast_to(local.reshape(-1), (local.shape[0], local.size)).copy()


# -- the kernels ----------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def inbox_at(reader, writer, nranks, capacity):
    # The first line of what `writer` sends `reader`: each pair has `capacity` lines (a rank's own pair is unused).
    return (reader * nranks + writer) * capacity


@cuda.jit(device=True)
def write_lines(local, lines, rank, thread, nthreads, typed, box, flag):
    # One thread: its values of local[rank] as lines of `flag` into every peer's inbox; no wait, no fence.
    nranks, count = local.shape[0], local.shape[1]
    per, capacity = local.itemsize // WORD_BYTES, lines.size // (nranks * nranks)
    for e in range(thread, count, nthreads):
        x = local[rank, e]
        for p in range(nranks):
            if p != rank:
                ll.ll_store_value(lines, inbox_at(p, rank, nranks, capacity) + e * per, per, typed, box, x, flag)


@cuda.jit(device=True)
def report(status, rank, code, peer):
    # One thread: fold its outcome into its rank's (code, peer); the host wrote (RUNNING, nranks) before the launch.
    cuda.atomic.max(status, (rank, 0), int64(code))
    if code != dp.OK:
        cuda.atomic.min(status, (rank, 1), int64(peer))


def _signature(dtype: str, reduce: bool) -> str:
    data = f"{dtype}[:, ::1]"
    op = "int64, " if reduce else ""
    return f"void({data}, {data}, uint64[::1], int32[::1], int64[:, ::1], uint32, {op}int64, int64)"


@register(_signature("float32", True), _signature("int32", True))
@cuda.jit
def ll_all_reduce_kernel(local, out, lines, abort, status, flag, op, group_threads, spins_before_check):
    """One thread: thread ``threadIdx.x % group_threads`` of rank ``threadIdx.x // group_threads``: write its
    values to every peer, then fold each of them over the ranks in rank order, polling each peer's line."""
    nranks, count = local.shape[0], local.shape[1]
    rank = int64(cuda.threadIdx.x // group_threads)
    thread = int64(cuda.threadIdx.x % group_threads)
    if rank >= nranks:
        return
    per, capacity = local.itemsize // WORD_BYTES, lines.size // (nranks * nranks)
    box = cuda.local.array(2, uint32)  # a value's bits, as words and as the value (ll.pack_words)
    typed = box.view(local.dtype)
    write_lines(local, lines, rank, thread, group_threads, typed, box, flag)
    code, peer = dp.OK, nranks
    for e in range(thread, count, group_threads):
        acc = local[rank, e]
        for p in range(nranks):
            v = local[rank, e]
            if p != rank:
                ok, v = ll.ll_load_value(lines, inbox_at(rank, p, nranks, capacity) + e * per, per, typed, box, flag,
                                         abort, spins_before_check)  # fmt: skip
                if not ok:
                    code, peer = dp.ABORTED_RECV, p
                    break
            acc = v if p == 0 else dp.apply_op(op, acc, v)
        if code != dp.OK:
            break
        out[rank, e] = acc
    report(status, rank, code, peer)


@register(_signature("float32", False), _signature("int32", False))
@cuda.jit
def ll_all_gather_kernel(local, out, lines, abort, status, flag, group_threads, spins_before_check):
    """One thread: thread ``threadIdx.x % group_threads`` of rank ``threadIdx.x // group_threads``: write its
    values to every peer and into its own block of ``out``, then copy each peer's values into that peer's block."""
    nranks, count = local.shape[0], local.shape[1]
    rank = int64(cuda.threadIdx.x // group_threads)
    thread = int64(cuda.threadIdx.x % group_threads)
    if rank >= nranks:
        return
    per, capacity = local.itemsize // WORD_BYTES, lines.size // (nranks * nranks)
    box = cuda.local.array(2, uint32)
    typed = box.view(local.dtype)
    write_lines(local, lines, rank, thread, group_threads, typed, box, flag)
    for e in range(thread, count, group_threads):
        out[rank, rank * count + e] = local[rank, e]
    code, peer = dp.OK, nranks
    for p in range(nranks):
        if p == rank or code != dp.OK:
            continue
        for e in range(thread, count, group_threads):
            ok, v = ll.ll_load_value(lines, inbox_at(rank, p, nranks, capacity) + e * per, per, typed, box, flag,
                                     abort, spins_before_check)  # fmt: skip
            if not ok:
                code, peer = dp.ABORTED_RECV, p
                break
            out[rank, p * count + e] = v
    report(status, rank, code, peer)


# -- the host side: the inboxes and the round counter, never reset ---------------------------------------------


class DeviceLL:
    """The LL inboxes, abort word and round counter of a one-GPU world, and the launches of its one-shot kernels.

    ``nranks`` ranks of ``group_threads`` threads each (32 by default on a GPU; 4 on the simulator, whose threads
    are costly); every pair of ranks has ``max_bytes`` of data (``max_bytes / 4`` lines of 8 bytes), the most one
    rank sends in one call (64 KiB by default, as ``NBCOLL_LL_BYTES``). ``rounds`` counts the calls: each takes
    the next, and its flag is ``wrapped(rounds)``.

    >>> ll = DeviceLL(2, max_bytes=64)
    >>> ll.capacity, ll.lines.shape, ll.rounds
    (16, (64,), 0)
    """

    def __init__(self, nranks: int, *, max_bytes: int = 1 << 16, group_threads: int | None = None) -> None:
        on_gpu = not backend.is_simulator()
        if group_threads is None:
            group_threads = 32 if on_gpu else 4
        if group_threads < 1 or not 1 <= nranks <= 1024 // group_threads:
            raise ValueError(f"nranks, group_threads: expected nranks >= 1 and group_threads >= 1 with "
                             f"nranks * group_threads <= 1024, got {nranks} and {group_threads}")  # fmt: skip
        if max_bytes < WORD_BYTES:
            raise ValueError(f"max_bytes: expected at least {WORD_BYTES} bytes per rank, got {max_bytes}")
        self.nranks, self.group_threads = nranks, group_threads
        self.capacity = -(-max_bytes // WORD_BYTES)
        self.lines = cuda.to_device(np.zeros(nranks * nranks * self.capacity, np.uint64))
        # The host writes the abort word while a kernel runs: mapped memory on a GPU, read with volatile loads.
        self.abort_word = cuda.mapped_array(1, np.int32) if on_gpu else cuda.to_device(np.zeros(1, np.int32))
        self.abort_word[0] = 0
        self.rounds = 0

    def next_flag(self) -> int:
        """Number the next call's round and return its 32-bit flag: 1, 2, ..., 2**32 - 1, then 1 again, never 0
        (what a line never written holds), so no flag is the one before it in the same lines.

        >>> ll = DeviceLL(1, max_bytes=4)
        >>> ll.rounds = 2**32 - 2
        >>> ll.next_flag(), ll.next_flag(), ll.rounds
        (4294967295, 1, 4294967296)
        """
        self.rounds += 1
        return wrapped(self.rounds)

    def abort(self) -> None:
        """Set the abort word: every thread still polling returns within ``spins_before_check`` spins.

        >>> ll = DeviceLL(2, max_bytes=8)
        >>> ll.abort(); int(ll.abort_word[0])
        1
        """
        self.abort_word[0] = 1

    def launch(
        self,
        collective: str,
        local: Any,
        out: Any,
        op: str = "sum",
        spins_before_check: int = dp.SPINS_BEFORE_CHECK_ABORT,
        ranks_started: int | None = None,
    ) -> np.ndarray:
        """Run ``collective`` (``"all_reduce"``, ``"all_gather"``) on device arrays of ``nranks`` rows (``out`` of
        ``local``'s shape, or ``(nranks, nranks * count)`` for an all-gather) in a new round, and return the status,
        ``[rank] = (code, peer given up on or nranks)``. ``ranks_started`` launches the groups of only so many ranks
        (a test of a peer that never comes). The round is taken even when the call fails.

        >>> ll = DeviceLL(2, max_bytes=16)
        >>> x = cuda.to_device(np.ones((2, 3), np.float32))
        >>> ll.launch("all_reduce", x, x).tolist(), x.copy_to_host()[0].tolist(), ll.rounds
        ([[0, 2], [0, 2]], [2.0, 2.0, 2.0], 1)
        """
        self._check(collective, local, out, op)
        status = cuda.to_device(np.array([[dp.RUNNING, self.nranks]] * self.nranks, np.int64))
        threads = (self.nranks if ranks_started is None else ranks_started) * self.group_threads
        args = (local, out, self.lines, self.abort_word, status, np.uint32(self.next_flag()))
        if collective == "all_reduce":
            ll_all_reduce_kernel[1, threads](*args, dp.OPS[op], self.group_threads, spins_before_check)
        else:
            ll_all_gather_kernel[1, threads](*args, self.group_threads, spins_before_check)
        return status.copy_to_host()

    def all_reduce(self, local: np.ndarray, out: np.ndarray | None = None, op: str = "sum") -> np.ndarray:
        """``out[r] = op over ranks of local`` for host arrays (``out`` defaults to ``local``: in place); raises
        :class:`~nbcoll.comm.errors.CommAbortedError` naming each rank that stopped and the peer it waited for.

        >>> DeviceLL(3, max_bytes=8).all_reduce(np.arange(6, dtype=np.int32).reshape(3, 2)).tolist()
        [[6, 9], [6, 9], [6, 9]]
        """
        out = local if out is None else out
        d_local = cuda.to_device(local)
        d_out = d_local if out is local else cuda.to_device(out)
        raise_for_status(self.launch("all_reduce", d_local, d_out, op), "all_reduce")
        d_out.copy_to_host(out)
        return out

    def all_gather(self, local: np.ndarray) -> np.ndarray:
        """Every rank's row after every other, on every rank: a new ``(nranks, nranks * count)`` host array.

        >>> DeviceLL(2, max_bytes=8).all_gather(np.array([[1.0], [2.0]])).tolist()     # float64: two lines each
        [[1.0, 2.0], [1.0, 2.0]]
        """
        d_out = cuda.device_array((self.nranks, local.size), local.dtype)
        raise_for_status(self.launch("all_gather", cuda.to_device(local), d_out), "all_gather")
        return d_out.copy_to_host()

    def _check(self, collective: str, local: Any, out: Any, op: str) -> None:
        if collective not in COLLECTIVES:
            raise ValueError(f"collective: expected one of {', '.join(COLLECTIVES)}, got {collective!r}")
        if op not in dp.OPS:
            raise ValueError(f"op: expected one of {', '.join(dp.OPS)}, got {op!r}")
        if local.ndim != 2 or local.shape[0] != self.nranks:
            raise ValueError(f"local: expected an array of shape ({self.nranks}, count), got {local.shape}")
        if np.dtype(local.dtype) not in [np.dtype(t) for t in DTYPES]:
            raise ValueError(f"local: expected one of float32, float64, int32, int64, got {local.dtype}")
        count = local.shape[1]
        shape = local.shape if collective == "all_reduce" else (self.nranks, self.nranks * count)
        if out.shape != shape or out.dtype != local.dtype:
            raise ValueError(f"out: expected shape {shape} and dtype {local.dtype}, got {out.shape} {out.dtype}")
        lines = count * (local.dtype.itemsize // WORD_BYTES)
        if lines > self.capacity:
            raise ValueError(f"local: expected at most {self.capacity * WORD_BYTES} bytes per rank (max_bytes), got "
                             f"{count} x {local.dtype} ({lines * WORD_BYTES} bytes)")  # fmt: skip


def raise_for_status(status: np.ndarray, collective: str) -> None:
    """Raise :class:`~nbcoll.comm.errors.CommAbortedError` when a rank did not finish, naming it and the peer whose
    lines it waited for (``status[r] = (code, peer)``, as :meth:`DeviceLL.launch` gives).

    >>> raise_for_status(np.array([[0, 2], [0, 2]]), "all_reduce")          # nothing to say
    >>> raise_for_status(np.array([[dp.ABORTED_RECV, 2], [dp.ABORTED_RECV, 2], [dp.RUNNING, 3]]), "all_gather")
    Traceback (most recent call last):
        ...
    nbcoll.comm.errors.CommAbortedError: all_gather (ll, device): the abort word was set; rank 0 waited for the \
lines of rank 2; rank 1 waited for the lines of rank 2; rank 2 never ran
    """
    stopped = [
        f"rank {r} " + ("never ran" if code == dp.RUNNING else f"waited for the lines of rank {int(peer)}")
        for r, (code, peer) in enumerate(status)
        if code != dp.OK
    ]
    if stopped:
        raise CommAbortedError(f"{collective} (ll, device): the abort word was set; " + "; ".join(stopped))
