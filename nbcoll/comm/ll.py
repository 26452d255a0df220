"""The LL protocol of the one-shot collectives: the data carry their own ready flag, so nothing waits for a credit.

The direct windows (:mod:`nbcoll.comm.window`) announce a round with a flag written after the data, and free it
with a second flag once every peer has read it: every round waits twice, and each wait is a round trip through
the shared page. For a message of a few bytes those waits are the whole cost. NCCL answers with its LL protocol,
and so does this module: each rank owns an *LL buffer* that every rank of the machine has mapped, made of 8-byte
lines that each hold 4 bytes of data and the round number (:mod:`nbcoll.kernels.ll`), in two halves used by
alternate rounds. Round ``r`` of a one-shot collective, on every rank::

    lines(me)[r % 2] = r | my words                    # one store per line: no flag to write after the data
    for each peer p: poll lines(p)[r % 2] until every line carries r     (a snapshot of p's words)
    out = fold(words of rank 0, ..., of rank n-1)      # in rank order; or copy each peer's words into its block

The writer never waits. When rank ``a`` writes half ``h`` in round ``r``, every peer ``b`` has finished reading
``a``'s round ``r-2`` there: ``a`` has finished round ``r-1``, so it has read ``b``'s round ``r-1`` lines, which
``b`` wrote only after its round ``r-2`` ended, and ``b``'s round ``r-2`` ends by reading ``a``'s half ``h``.
With two halves, the previous round's reads are the credit. The poll is a step like every other, so the watchdog
bounds it (timeout, abort, dead peer). Every rank folds the same words in the same rank order, so every rank
computes the same bits.

Half of every line is flag, so LL moves twice the bytes: the engine uses it for one-shot collectives of at most
``NBCOLL_LL_BYTES`` per rank (default 64 KiB, 0 turns it off), when every peer is on this machine.

Example::

    ll = LLBuffers(windows)                       # windows: DirectWindows of 4 x NBCOLL_LL_BYTES per rank
    prims = ctx.prims(x, y, op="sum")
    round_ = ll.reserve(1)                        # numbered when the collective is planned
    steps = [ll.send(prims, 0, 64, round_), ll.recv_reduce_copy(prims, 0, 64, round_)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.comm.connection import copy_device
from nbcoll.comm.primitives import COPY, DIRECT, POST, RECV, REDUCE, SEND, Flag, Prims, name_of
from nbcoll.kernels import combine as combine_kernels
from nbcoll.kernels import ll as ll_kernels

LINE_BYTES = 8
WORD_BYTES = 4
_SEND, _REDUCE, _POST = int(SEND), int(REDUCE), int(POST)  # plain ints: a test on a Flag builds an enum member
PROBE_ABOVE = 256
"""Segments of more lines than this are polled by their last line first (one thread), then read whole: a load of
every line costs a launch of as many threads, which the simulator runs one by one."""


def buffer_bytes(payload_bytes: int) -> int:
    """Bytes of one rank's LL buffer for rounds of up to ``payload_bytes``: two halves of 8-byte lines."""
    return 2 * LINE_BYTES * -(-payload_bytes // WORD_BYTES)


class _Peer:
    """Stands for a peer in traces, where a FIFO step would name its connection."""

    __slots__ = ("peer",)

    def __init__(self, peer: int) -> None:
        self.peer = peer


class LLBuffers:
    """Every rank's LL buffer, mapped here, and the scratch this rank reads its peers' words into.

    Example::

        ll = LLBuffers(DirectWindows(ctrl, buffer_bytes(1 << 16), drive, recorder))
        ll.capacity(np.float32)            # elements of one round: 16384
    """

    def __init__(self, windows: Any) -> None:
        self.windows = windows  # the mapped buffers (their set-up is the direct windows')
        self.rank, self.nranks = windows.rank, windows.nranks
        self.lines_per_half = windows.nbytes // (2 * LINE_BYTES)
        self.rounds = 0
        self.others = [p for p in range(self.nranks) if p != self.rank]
        scratch = memory.communicator_zeros  # the communicator's own, not counted in memory.stats()
        self.staging = scratch(self.lines_per_half, np.uint32)  # our words, when the data are not whole words
        self.snapshots = {p: scratch(self.lines_per_half, np.uint32) for p in self.others}
        self.missing = scratch(1, np.int32)
        self.probe = scratch(1, np.uint32)  # where a poll of one line puts its word

    def capacity(self, dtype: Any, segments: int = 1) -> int:
        """Elements of ``dtype`` one round carries in each of ``segments`` segments (one per peer: all-to-all)."""
        return (self.lines_per_half // segments) * WORD_BYTES // np.dtype(dtype).itemsize

    def lines(self, rank: int, round_: int, start: int, count: int) -> Any:
        """Lines ``start`` to ``start + count`` of ``rank``'s half for ``round_``."""
        start += (round_ % 2) * self.lines_per_half
        return self.windows.windows[rank].array.view(np.uint64)[start : start + count]

    def reserve(self, count: int) -> int:
        """Number the ``count`` rounds of one collective, when it is planned; returns the first.

        As the direct windows' rounds (:meth:`DirectWindows.reserve`): every rank plans its collectives in the same
        order, so every rank gives the same numbers to the same rounds.
        """
        first = self.rounds + 1
        self.rounds += count
        return first

    def send(self, prims: Prims, lo: int, hi: int, round_: int, block: int = 0, segments: int = 1) -> LLStep:
        """``lines(me) = round_ | local[lo:hi]``: one store, no wait.

        With ``segments`` > 1, segment ``s`` holds ``local[s*block + lo : s*block + hi]``, each padded to whole
        words: an all-to-all writes one segment per destination, and each peer reads its own.
        """
        return LLStep(self, prims, DIRECT | SEND, lo, hi, round_, block, segments)

    def recv_reduce_copy(self, prims: Prims, lo: int, hi: int, round_: int, block: int = 0, segment: int = 0) -> LLStep:
        """``out[lo:hi] = op(words of rank 0, ..., of rank n-1)`` once every peer's lines carry this round.

        A reduce-scatter reads ``segment`` (its rank) of every peer's lines, and its own input at
        ``local[segment*block + lo : segment*block + hi]``.
        """
        flags = DIRECT | RECV | REDUCE | COPY | (POST if prims.post is not None else Flag(0))
        return LLStep(self, prims, flags, lo, hi, round_, block, segment=segment)

    def recv(self, prims: Prims, lo: int, hi: int, round_: int, block: int, segment: int = 0) -> LLStep:
        """``out[p*block + lo : p*block + hi] = segment of p's words`` for every peer ``p``: an all-gather's chunk
        (segment 0), or an all-to-all's (the segment of this rank)."""
        return LLStep(self, prims, DIRECT | RECV | COPY, lo, hi, round_, block, segment=segment)

    def close(self) -> None:
        self.windows.close()


class LLStep:
    """One step of an LL round; it has the interface of a :class:`~nbcoll.comm.primitives.Step`.

    * ``DIRECT | SEND``: write ``local[lo:hi]`` into this rank's lines of the round (always ready);
    * ``DIRECT | RECV | REDUCE | COPY``: ready when every peer's lines carry the round; fold in rank order;
    * ``DIRECT | RECV | COPY``: the same wait; copy each peer's words into its block of ``out``.

    ``block``, ``segments`` and ``segment`` place the chunks of an all-to-all (see :meth:`LLBuffers.send`).
    """

    def __init__(
        self,
        ll: LLBuffers,
        prims: Prims,
        flags: Flag,
        lo: int,
        hi: int,
        round_: int,
        block: int = 0,
        segments: int = 1,
        segment: int = 0,
    ) -> None:
        self.ll, self.prims, self.flags, self.lo, self.hi = ll, prims, flags, lo, hi
        self.round, self.block, self.segments, self.segment = round_, block, segments, segment
        self.bits = int(flags)  # tested while running: int tests cost less than Flag ones
        self.nbytes = (hi - lo) * prims.itemsize
        self.words = -(-self.nbytes // WORD_BYTES)
        sending = bool(self.bits & _SEND)
        self.late = [] if sending else list(ll.others)  # peers whose lines of this round have not all arrived
        self.send = [_Peer(p) for p in ll.others] if sending else []
        self.recv = [] if sending else [_Peer(p) for p in ll.others]

    def rearm(self, round_: int) -> None:
        """Make this step new again, for ``round_``: a replayed collective (:mod:`nbcoll.comm.replay`) reruns it."""
        self.round = round_
        if self.recv:
            self.late = list(self.ll.others)

    @property
    def name(self) -> str:
        return "ll_" + name_of(self.flags & ~DIRECT)

    @property
    def span(self) -> tuple[int, int]:
        return self.lo, self.hi

    @property
    def peers(self) -> list[int]:
        return self.ll.others

    def ready(self) -> bool:
        """Poll every peer still late: a load that finds every line of the round keeps their words."""
        if self.late:
            self.late = [peer for peer in self.late if self._lines_missing(peer)]
        return not self.late

    def _lines_missing(self, peer: int) -> int:
        ll, words = self.ll, self.words
        lines = ll.lines(peer, self.round, self.segment * words, words)
        if words > PROBE_ABOVE and ll_kernels.load(ll.probe, lines[words - 1 :], self.round, ll.missing):
            return 1  # the last line is not there yet: no need to read them all
        return ll_kernels.load(ll.snapshots[peer][:words], lines, self.round, ll.missing)

    def waiting_peers(self) -> list[int]:
        return list(self.late)

    def waiting_for(self) -> str:
        if not self.late:
            return "nothing (ready)"
        return f"ranks {self.late} to write their LL lines of round {self.round}"

    def describe(self) -> str:
        return f"{self.name} of {self.nbytes} bytes, round {self.round}"

    def run(self) -> None:
        """Store this rank's lines, or fold every rank's words in rank order, or copy the peers' blocks."""
        if self.bits & _SEND:
            self._store()
            return
        if not self.bits & _REDUCE:
            self._copy_blocks()
            return
        p, ll, lo, hi = self.prims, self.ll, self.lo, self.hi
        if self.nbytes:  # the fold, here rather than in a helper: the path to the kernel stays short
            dst = p.out[lo:hi]
            at = self.segment * self.block  # where this rank's part of the input starts (a reduce-scatter's block)
            local = p.local[at + lo : at + hi]
            if ll.rank >= 2 and memory.overlaps(dst, local):  # in place: keep ours before the folds overwrite it
                local = memory.empty(local.size, local.dtype)
                copy_device(local, p.local[at + lo : at + hi])
            sources = [local if r == ll.rank else self._words_of(r) for r in range(ll.nranks)]
            combine_kernels.fold_into(p.rule, dst, sources[0], sources[1])  # unchecked: checked at the call
            for src in sources[2:]:
                combine_kernels.fold_into(p.rule, dst, dst, src)
            if self.bits & _POST:
                p.post(dst)
        self._charge_received()

    def _store(self) -> None:
        p, ll, lo, hi, words = self.prims, self.ll, self.lo, self.hi, self.words
        if self.nbytes:
            if self.segments == 1 and p.itemsize % WORD_BYTES == 0:  # whole words already: store the input
                staged = p.local[lo:hi].view(np.uint32)
            else:  # bytes, half-words, or one segment per peer: through a staging row, each segment padded
                staged = ll.staging[: self.segments * words]
                for s in range(self.segments):
                    segment = staged[s * words : (s + 1) * words].view(np.uint8)[: self.nbytes].view(p.dtype)
                    copy_device(segment, p.local[s * self.block + lo : s * self.block + hi])
            ll_kernels.store(ll.lines(ll.rank, self.round, 0, staged.size), staged, self.round)
            p.charge_copy(ll.rank, self.segments * self.nbytes)  # into this rank's own lines, read by every peer
        for peer in ll.others:
            p.charge(peer, self.nbytes, sent=True)

    def _words_of(self, peer: int) -> Any:
        return self.ll.snapshots[peer][: self.words].view(np.uint8)[: self.nbytes].view(self.prims.dtype)

    def _copy_blocks(self) -> None:
        p = self.prims
        if self.nbytes:
            for peer in self.ll.others:
                start = peer * self.block + self.lo
                copy_device(p.out[start : start + self.hi - self.lo], self._words_of(peer))
        self._charge_received()

    def _charge_received(self) -> None:
        for peer in self.ll.others:
            self.prims.charge_copy(peer, self.nbytes)  # out of the lines the peer wrote
            self.prims.charge(peer, self.nbytes, sent=False)
