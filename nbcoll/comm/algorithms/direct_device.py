"""The one-shot all-reduce of :mod:`.direct` as one kernel, and its two-shot sibling, over registered buffers.

When every rank can read every other rank's buffer in place (NVLink, or one GPU), an all-reduce needs no FIFO:
PyTorch SymmetricMemory's ``one_shot_all_reduce`` and ``two_shot_all_reduce_`` (and vLLM's custom all-reduce)
only meet at barriers of signal pads (:mod:`nbcoll.comm.device.signal_pads`) and read the peers' memory
directly. One rank's loop::

    one-shot                                    two-shot
    barrier    every buffer is ready            barrier    every buffer is ready
    for i in the block's part:                  for i in this rank's shard of the block's part:
        out[me, i] = op over p of buffers[p, i]     v = op over p of buffers[p, i]
                                                    for p: out[p, i] = v     (out may be buffers: in place)
    barrier    nobody reads my buffer any more  barrier    every shard is in every output

One-shot reads ``n`` buffers and writes one output per rank: the fewest steps, for small messages. Two-shot
reads and writes ``n`` times a shard, ``1/n`` of the buffer, so each rank moves ``2 (n - 1) / n`` of it, as a
ring does, in two steps instead of ``2 (n - 1)``. Both fold the ranks in rank order, as :mod:`.direct` does,
so every rank's result is bit for bit the same; :func:`one_shot_all_reduce_reference` and
:func:`two_shot_all_reduce_reference` follow the same steps in NumPy.

This is the one-GPU world of :mod:`.ring_device`: every rank's registered buffer is a row of one 2-D array,
each rank a group of ``group_threads`` threads of one block (so every rank is resident while the others wait),
and block ``b`` of the grid takes part ``b`` of the buffer with its own pads. Example (on the simulator)::

    symm = DeviceSymmetricMemory(3, group_threads=4)
    x = np.arange(15, dtype=np.int64).reshape(3, 5)
    symm.all_reduce(x, algo="two_shot")      # every row is now the column sums: [15, 18, 21, 24, 27]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int32, int64

from nbcoll import backend
from nbcoll.comm.algorithms.common import blocks
from nbcoll.comm.algorithms.ring_device import DTYPES, block_span
from nbcoll.comm.device import prims as dp
from nbcoll.comm.device import signal_pads as sp
from nbcoll.comm.errors import CommAbortedError
from nbcoll.kernels.registry import register

ALGOS = ("one_shot", "two_shot")

# Array sizes the kernels allocate: module-level ints, which Numba reads as the constants an allocation needs.
_SYNC_WORDS = dp.MAX_GROUPS * dp.SYNC_WORDS
_STATE_WORDS = sp.STATE_WORDS


def _fold(op: str, acc: np.ndarray, value: np.ndarray) -> np.ndarray:
    """One step of the kernels' fold, ``apply_op(op, acc, value)``, elementwise (max and min keep ``acc`` on a
    tie, as the kernels' comparisons do)."""
    with np.errstate(all="ignore"):  # integers wrap as the kernels' do
        if op == "sum":
            return acc + value
        if op == "prod":
            return acc * value
        return np.where(acc >= value if op == "max" else acc <= value, acc, value)


def _fold_ranks(buffers: np.ndarray, op: str, lo: int, hi: int) -> np.ndarray:
    """``op`` over the ranks' elements ``[lo, hi)``, folded in rank order: rank 0's, then 1's, ..."""
    acc = buffers[0, lo:hi].copy()
    for p in range(1, buffers.shape[0]):
        acc = _fold(op, acc, buffers[p, lo:hi])
    return acc


def one_shot_all_reduce_reference(buffers: np.ndarray, op: str = "sum", nblocks: int = 1) -> np.ndarray:
    """Each row of the result is ``op`` over the rows of ``buffers``: every rank folds every buffer, rank 0 first,
    as :func:`one_shot_all_reduce_kernel` does for each block's part.

    >>> one_shot_all_reduce_reference(np.arange(6.0).reshape(3, 2))
    array([[6., 9.],
           [6., 9.],
           [6., 9.]])
    """
    out = np.empty_like(buffers)
    for lo, hi in blocks(0, buffers.shape[1], nblocks):
        for r in range(buffers.shape[0]):
            out[r, lo:hi] = _fold_ranks(buffers, op, lo, hi)
    return out


def two_shot_all_reduce_reference(buffers: np.ndarray, op: str = "sum", nblocks: int = 1) -> np.ndarray:
    """Each row of the result is ``op`` over the rows of ``buffers``: rank ``r`` folds shard ``r`` of each block's
    part from every buffer, rank 0 first, and stores it into every rank's output, as
    :func:`two_shot_all_reduce_kernel` does.

    >>> two_shot_all_reduce_reference(np.arange(6).reshape(2, 3), "max")
    array([[3, 4, 5],
           [3, 4, 5]])
    """
    n, out = buffers.shape[0], np.empty_like(buffers)
    for lo, hi in blocks(0, buffers.shape[1], nblocks):
        for s_lo, s_hi in blocks(lo, hi, n):  # shard r of the block's part belongs to rank r
            out[:, s_lo:s_hi] = _fold_ranks(buffers, op, s_lo, s_hi)
    return out


# -- the kernels ----------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def fold_ranks(buffers, i, op):
    # One thread: op over the ranks of element i, rank 0 first (every rank folds in the same order).
    acc = buffers[0][i]
    for p in range(1, len(buffers)):
        acc = dp.apply_op(op, acc, buffers[p][i])
    return acc


def _signature(dtype: str) -> str:
    data = f"{dtype}[:, ::1]"
    return f"void({data}, {data}, uint32[::1], int32[::1], int64[:, :, ::1], int64, int64, int64, int64)"


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def one_shot_all_reduce_kernel(buffers, out, pads, abort, status, op, group_threads, scope, spins_before_check):
    """One thread: thread ``threadIdx.x % group_threads`` of rank ``threadIdx.x // group_threads`` in block
    ``blockIdx.x``, folding every rank's buffer into its rank's output for its elements of the block's part
    (PyTorch's ``one_shot_all_reduce_kernel``); thread 0 of each rank signals for it and writes its status."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    dp.clear_sync(sync)
    cuda.syncthreads()  # the only block-wide barrier: after it each rank meets only its own group
    nranks, count = len(buffers), buffers[0].shape[0]  # rows of a 2-D array, or a tuple of 1-D arrays
    rank = int64(cuda.threadIdx.x // group_threads)
    thread = int64(cuda.threadIdx.x % group_threads)
    if rank >= nranks:
        return
    block = int64(cuda.blockIdx.x)
    state = cuda.local.array(_STATE_WORDS, int64)
    state[sp.CODE] = sp.OK
    state[sp.BARRIERS] = 0
    state[sp.PEER] = -1  # no peer waited for
    ids = (block, rank, nranks, thread, group_threads, scope, spins_before_check)
    lo, hi = block_span(0, count, int64(cuda.gridDim.x), block)
    sp.barrier(pads, abort, sync, state, ids)  # every rank's buffer holds its input
    if state[sp.CODE] == sp.OK:
        for i in range(lo + thread, hi, group_threads):
            out[rank][i] = fold_ranks(buffers, i, op)
    sp.barrier(pads, abort, sync, state, ids)  # every rank is done reading this rank's buffer
    if thread == 0:
        status[block, rank, 0] = state[sp.CODE]
        status[block, rank, 1] = state[sp.BARRIERS]
        status[block, rank, 2] = state[sp.PEER]


@register(_signature("float32"), _signature("int32"))
@cuda.jit
def two_shot_all_reduce_kernel(buffers, out, pads, abort, status, op, group_threads, scope, spins_before_check):
    """One thread: thread ``threadIdx.x % group_threads`` of rank ``threadIdx.x // group_threads`` in block
    ``blockIdx.x``, folding its elements of the rank's shard of the block's part from every buffer and storing
    each into every rank's output (PyTorch's ``two_shot_all_reduce_kernel_inplace`` when ``out`` is ``buffers``:
    only this thread reads or writes element ``i`` between the barriers, so reading it before writing it is
    enough); thread 0 of each rank signals for it and writes its status."""
    sync = cuda.shared.array(_SYNC_WORDS, int32)
    dp.clear_sync(sync)
    cuda.syncthreads()
    nranks, count = len(buffers), buffers[0].shape[0]  # rows of a 2-D array, or a tuple of 1-D arrays
    rank = int64(cuda.threadIdx.x // group_threads)
    thread = int64(cuda.threadIdx.x % group_threads)
    if rank >= nranks:
        return
    block = int64(cuda.blockIdx.x)
    state = cuda.local.array(_STATE_WORDS, int64)
    state[sp.CODE] = sp.OK
    state[sp.BARRIERS] = 0
    state[sp.PEER] = -1  # no peer waited for
    ids = (block, rank, nranks, thread, group_threads, scope, spins_before_check)
    lo, hi = block_span(0, count, int64(cuda.gridDim.x), block)
    s_lo, s_hi = block_span(lo, hi - lo, nranks, rank)  # this rank's shard of the block's part
    sp.barrier(pads, abort, sync, state, ids)  # every rank's buffer holds its input
    if state[sp.CODE] == sp.OK:
        for i in range(s_lo + thread, s_hi, group_threads):
            v = fold_ranks(buffers, i, op)
            for p in range(nranks):
                out[p][i] = v
    sp.barrier(pads, abort, sync, state, ids)  # every shard is in every output; nobody reads a buffer any more
    if thread == 0:
        status[block, rank, 0] = state[sp.CODE]
        status[block, rank, 1] = state[sp.BARRIERS]
        status[block, rank, 2] = state[sp.PEER]


_KERNELS = {"one_shot": one_shot_all_reduce_kernel, "two_shot": two_shot_all_reduce_kernel}
REFERENCES = {"one_shot": one_shot_all_reduce_reference, "two_shot": two_shot_all_reduce_reference}
"""The NumPy reference of each algorithm, by name: the kernel's result to the bit."""


# -- the host side: the pads, allocated once and left at zero by every call ------------------------------------


class DeviceSymmetricMemory:
    """The signal pads and abort word of a one-GPU world's registered buffers, and the launch of its all-reduces.

    ``nranks`` ranks, ``nblocks`` blocks (each with its own pads and part of the buffer), ``group_threads``
    threads per rank (a multiple of 32 on a GPU, which names a barrier per rank; 4 by default on the simulator,
    whose threads are costly). ``scope`` is ``"gpu"`` or ``"system"``: the fences around each signal.

    >>> symm = DeviceSymmetricMemory(3, nblocks=2)
    >>> symm.pads.shape, symm.pads_clear()     # a uint32 per (block, owner, sender), all zero
    ((18,), True)
    """

    def __init__(self, nranks: int, *, nblocks: int = 1, group_threads: int | None = None,
                 scope: str = "gpu") -> None:  # fmt: skip
        on_gpu = not backend.is_simulator()
        if group_threads is None:
            group_threads = max(32, min(256, 1024 // max(nranks, 1) // 32 * 32)) if on_gpu else 4
        if not 1 <= nranks <= dp.MAX_GROUPS:
            raise ValueError(f"nranks: expected 1 to {dp.MAX_GROUPS} ranks in one block, got {nranks}")
        if nblocks < 1:
            raise ValueError(f"nblocks: expected a positive integer, got {nblocks}")
        if group_threads < 1 or nranks * group_threads > 1024 or (on_gpu and group_threads % 32):
            raise ValueError(f"group_threads: expected {'a multiple of 32' if on_gpu else 'at least 1'} with "
                             f"nranks * group_threads <= 1024, got {group_threads} for {nranks} ranks")  # fmt: skip
        if scope not in dp.SCOPES:
            raise ValueError(f"scope: expected one of {', '.join(dp.SCOPES)}, got {scope!r}")
        self.nranks, self.nblocks, self.group_threads, self.scope = nranks, nblocks, group_threads, scope
        self.pads = cuda.to_device(np.zeros(nblocks * nranks * nranks, np.uint32))
        # The host writes the abort word while a kernel runs: mapped memory on a GPU, read with volatile loads.
        self.abort_word = cuda.mapped_array(1, np.int32) if on_gpu else cuda.to_device(np.zeros(1, np.int32))
        self.abort_word[0] = 0

    def pads_clear(self) -> bool:
        """Whether every signal pad is 0, as every barrier that completes leaves it.

        >>> DeviceSymmetricMemory(2).pads_clear()
        True
        """
        return not self.pads.copy_to_host().any()

    def abort(self) -> None:
        """Set the abort word: every rank still spinning returns within ``spins_before_check`` spins.

        >>> symm = DeviceSymmetricMemory(2)
        >>> symm.abort(); int(symm.abort_word[0])
        1
        """
        self.abort_word[0] = 1

    def reset(self) -> None:
        """Zero the pads and the abort word after an aborted call (only while no kernel runs on them).

        >>> symm = DeviceSymmetricMemory(2)
        >>> symm.abort(); symm.reset(); int(symm.abort_word[0]), symm.pads_clear()
        (0, True)
        """
        self.pads.copy_to_device(np.zeros(self.pads.shape, np.uint32))
        self.abort_word[0] = 0

    def launch(
        self,
        buffers: Any,
        out: Any,
        algo: str = "one_shot",
        op: str = "sum",
        spins_before_check: int = dp.SPINS_BEFORE_CHECK_ABORT,
        ranks_started: int | None = None,
    ) -> np.ndarray:
        """Run ``algo``'s kernel on device arrays (``nranks`` rows each, as one 2-D array or a tuple of 1-D arrays,
        one per rank's registered buffer; ``out`` may be ``buffers`` for two-shot) and return the status,
        ``[block, rank] = (code, barriers started, peer waited for)``. ``ranks_started`` launches the groups of
        only so many ranks (a test of a peer that never comes).

        >>> symm = DeviceSymmetricMemory(2)
        >>> x = cuda.to_device(np.ones((2, 3), np.float32))
        >>> symm.launch(x, x, "two_shot")[0].tolist()     # (code, barriers, peer): OK after both barriers
        [[0, 2, -1], [0, 2, -1]]
        """
        if algo not in ALGOS:
            raise ValueError(f"algo: expected one of {', '.join(ALGOS)}, got {algo!r}")
        if op not in dp.OPS:
            raise ValueError(f"op: expected one of {', '.join(dp.OPS)}, got {op!r}")
        n = self.nranks
        shape, kind = _world_of(buffers), _world_of(out)
        if shape is None or kind is None or shape[0] != n or shape != kind:
            raise ValueError(f"buffers, out: expected two worlds of {n} rows of one count and dtype (a 2-D array or "
                             f"a tuple of 1-D arrays each), got {shape} and {kind}")  # fmt: skip
        if shape[2] not in [np.dtype(t) for t in DTYPES]:
            raise ValueError(f"buffers: expected one of float32, float64, int32, int64, got {shape[2]}")
        shared = out is buffers or (isinstance(out, tuple) and any(o is b for o, b in zip(out, buffers, strict=True)))
        if algo == "one_shot" and shared:
            raise ValueError("out: the one-shot all-reduce reads every buffer until its last barrier, expected an "
                             "output other than buffers (two_shot works in place)")  # fmt: skip
        status = cuda.to_device(np.full((self.nblocks, n, 3), sp.RUNNING, np.int64))
        ranks = n if ranks_started is None else ranks_started
        args = (dp.OPS[op], self.group_threads, dp.SCOPES[self.scope], spins_before_check)
        _KERNELS[algo][self.nblocks, ranks * self.group_threads](buffers, out, self.pads, self.abort_word, status,
                                                                 *args)  # fmt: skip
        return status.copy_to_host()

    def all_reduce(self, x: np.ndarray, out: np.ndarray | None = None, op: str = "sum",
                   algo: str = "one_shot") -> np.ndarray:  # fmt: skip
        """``out[r] = op over ranks of x[r]`` for host arrays (``out`` defaults to ``x``: in place). Raises
        :class:`~nbcoll.comm.errors.CommAbortedError` naming each rank that stopped (and clears the pads it left
        behind); after a call that completes, every pad is 0 again.

        >>> symm = DeviceSymmetricMemory(3)
        >>> symm.all_reduce(np.arange(6, dtype=np.int64).reshape(3, 2), algo="one_shot").tolist()
        [[6, 9], [6, 9], [6, 9]]
        """
        out = x if out is None else out
        d_buffers = cuda.to_device(x)  # the registered buffers: every rank's input, readable by every rank
        d_out = d_buffers if algo == "two_shot" else cuda.device_array_like(d_buffers)
        status = self.launch(d_buffers, d_out, algo, op)
        if (status[:, :, 0] != sp.OK).any():
            self.reset()  # the pads an aborted barrier left behind, now that no kernel runs on them
            raise_for_status(status, algo)
        if not self.pads_clear():
            raise RuntimeError(f"pads: expected every signal pad to be 0 after a completed {algo} all-reduce")
        d_out.copy_to_host(out)
        return out


def _world_of(arrays: Any) -> tuple[int, int, np.dtype] | None:
    """(ranks, count, dtype) of a 2-D array or of a tuple of 1-D arrays of one shape and dtype; None otherwise."""
    if isinstance(arrays, tuple):
        ok = arrays and all(a.ndim == 1 and a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays)
        return (len(arrays), arrays[0].shape[0], np.dtype(arrays[0].dtype)) if ok else None
    return (*arrays.shape, np.dtype(arrays.dtype)) if getattr(arrays, "ndim", 0) == 2 else None


def raise_for_status(status: np.ndarray, algo: str = "one_shot") -> None:
    """Raise :class:`~nbcoll.comm.errors.CommAbortedError` when a rank of a block did not finish, naming it, the
    peer it waited for and the barrier (``status[b, r] = (code, barriers started, peer)``, as
    :meth:`DeviceSymmetricMemory.launch` gives).

    >>> raise_for_status(np.array([[[0, 2, -1], [0, 2, -1]]]))     # nothing to say
    >>> raise_for_status(np.array([[[sp.ABORTED_WAIT, 1, 1], [sp.RUNNING, -1, -1]]]))
    Traceback (most recent call last):
        ...
    nbcoll.comm.errors.CommAbortedError: all_reduce (one_shot, device): the abort word was set; rank 0 (block 0) \
waited for rank 1's signal at barrier 1; rank 1 (block 0) never ran
    """
    why = {sp.ABORTED_WAIT: "waited for rank {peer}'s signal", sp.ABORTED_PUT: "waited for rank {peer} to take its "
           "last signal"}  # fmt: skip
    stopped = [
        f"rank {r} (block {b}) "
        + (f"{why[int(code)].format(peer=int(peer))} at barrier {int(barrier)}" if code > 0 else "never ran")
        for b, row in enumerate(status)
        for r, (code, barrier, peer) in enumerate(row)
        if code != sp.OK
    ]
    if stopped:
        raise CommAbortedError(f"all_reduce ({algo}, device): the abort word was set; " + "; ".join(stopped))
