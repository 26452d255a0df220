"""The LL protocol of the one-shot collectives: the data carry their own ready flag, so nothing waits for a credit.

The direct windows (:mod:`nbcoll.comm.window`) announce a round with a flag written after the data, and free it
with a second flag once every peer has read it: every round waits twice, and each wait is a round trip through
the shared page. For a message of a few bytes those waits are the whole cost. NCCL answers with its LL protocol,
and so does this module: each rank owns an *LL buffer* that every rank of the machine has mapped, made of 8-byte
lines that each hold 4 bytes of data and the round number (:mod:`nbcoll.kernels.ll`), in ``S`` slots
(``NBCOLL_STEPS``, 8 by default, as NCCL's LL buffer has ``NCCL_STEPS``) that the rounds take in turn. Round ``r``
of a one-shot collective, on every rank::

    lines(me)[r % S] = r | my words                    # one store per line: no flag to write after the data
    for each peer p: poll lines(p)[r % S] until every line carries r     (a snapshot of p's words)
    out = fold(words of rank 0, ..., of rank n-1)      # in rank order; or copy each peer's words into its block

The writer of an all-reduce never waits. When rank ``a`` writes slot ``r % S`` in round ``r``, every peer ``b``
has finished reading ``a``'s round ``r-2``, so its round ``r-S`` too: ``a`` has finished round ``r-1``, so it has
read ``b``'s round ``r-1`` lines, which ``b`` wrote only after its round ``r-2`` ended. With two slots or more, the
previous round's reads are the credit. The poll is a step like every other, so the watchdog bounds it (timeout,
abort, dead peer). Every rank folds the same words in the same rank order, so every rank computes the same bits.

A broadcast breaks that chain: only the root writes data, and each other rank reads the root alone. So in an LL
broadcast every other rank writes one *presence* line (line 0, no data) in the round, which says "I have begun
round ``r``, so I have finished reading the rounds before". A write of round ``r`` into a slot whose last write
(round ``r-S``) carried data first makes sure that every peer has begun round ``r-S+1``, so none still reads that
data: ``seen``, the last round in which this rank read every peer's lines, says so at once after an all-reduce;
otherwise the write polls line 0 of each peer's slot of round ``r-S+1`` for that round *or a later one* (a peer
that has begun a later round has begun this one; :func:`nbcoll.kernels.ll.began`). A slot that last held a
presence line holds nothing a peer reads, so a broadcast's readers never wait to write theirs, and only the root
waits for its readers. The root of a broadcast therefore runs up to ``S-1`` rounds ahead of its slowest reader,
as an MPI root's eager sends do: on a machine with fewer cores than ranks, a root that may run ahead writes many
rounds in its turn on a core, and its readers read them in theirs::

    root:    wait until every peer's line 0 carries r-S+1 or later;  lines(root)[r % S] = r | words
    others:  (a data round S rounds back: the same wait);             line 0 of lines(me)[r % S] = r
             poll lines(root)[r % S] until every line carries r;       out = root's words

A reader does both in one step, a receive that *announces* itself first, as an NCCL receiver hands its credit
back within its receive: a step fewer to run for every reader of every round.

Half of every line is flag, so LL moves twice the bytes: the engine uses it for one-shot collectives of at most
``NBCOLL_LL_BYTES`` per rank (default 64 KiB, 0 turns it off), when every peer is on this machine.

The buffers, their slots and the rounds' numbers are this module's; the steps that write and poll them are
:mod:`nbcoll.comm.ll_step`'s, and the one-shot algorithms reach them through the LL protocol's primitives, which
have the names of every other protocol's (:mod:`nbcoll.comm.protocol_ll`).

Example::

    ll = LLBuffers(windows, slots=8)              # windows: DirectWindows of 2 x 8 x NBCOLL_LL_BYTES per rank
    prims = LLProtocol(ctx, x, y, x.size, op="sum")        # ctx.ll is ll: its rounds are numbered now (reserve)
    steps = [*prims.send(0, 64), *prims.recv_reduce_copy(0, 64)]   # an all-reduce's round: one step
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.comm.ll_step import LLStep
from nbcoll.kernels.ll import LINE_BYTES, WORD_BYTES


def buffer_bytes(payload_bytes: int, slots: int) -> int:
    """Bytes of one rank's LL buffer for rounds of up to ``payload_bytes``: ``slots`` slots of 8-byte lines."""
    return slots * LINE_BYTES * -(-payload_bytes // WORD_BYTES)


class LLBuffers:
    """Every rank's LL buffer, mapped here, and the scratch this rank reads its peers' words into.

    Example::

        ll = LLBuffers(DirectWindows(ctrl, buffer_bytes(1 << 16, 8), drive, recorder), slots=8)
        ll.capacity(np.float32)            # elements of one round: 16384
    """

    def __init__(self, windows: Any, slots: int, compiled: bool = False, copies: Any = None) -> None:
        self.windows = windows  # the mapped buffers (their set-up is the direct windows')
        self.rank, self.nranks, self.slots = windows.rank, windows.nranks, slots
        # CPU fast paths, each decided by nbcoll.comm.fast_paths: NBCOLL_LL_COMPILED's steps write and poll through
        # compiled loops (nbcoll.comm.ll_compiled); a CopyPolicy may stream the lines (NBCOLL_STREAM_SHARED_BYTES)
        self.compiled = compiled
        self.copies = copies
        if compiled:
            from nbcoll.comm.ll_compiled import CompiledLLStep  # a fast path's module: imported only when it is on

            self.step_class: type[LLStep] = CompiledLLStep
        else:
            self.step_class = LLStep
        self.lines_per_slot = windows.nbytes // (slots * LINE_BYTES)
        self.line_views = [window.array.view(np.uint64) for window in windows.windows]  # every rank's, as lines
        self.rounds = 0
        self.seen = 0  # the last round in which this rank read every peer's lines (each had begun that round)
        self.others = [p for p in range(self.nranks) if p != self.rank]
        scratch = memory.communicator_zeros  # the communicator's own, not counted in memory.stats()
        self.staging = scratch(self.lines_per_slot, np.uint32)  # our words, when the data are not whole words
        self.snapshots = {p: scratch(self.lines_per_slot, np.uint32) for p in self.others}
        self.missing = scratch(1, np.int32)
        self.probe = scratch(1, np.uint32)  # where a poll of one line puts its word, or its round
        self.slot_is_read = [False] * slots  # whether this rank's last write into each slot carried data peers read
        self.presence_word = self.staging[:1]  # what a presence line carries: its flag only

    def capacity(self, dtype: Any, segments: int = 1) -> int:
        """Elements of ``dtype`` one round carries in each of ``segments`` segments (one per peer: all-to-all)."""
        return (self.lines_per_slot // segments) * WORD_BYTES // np.dtype(dtype).itemsize

    def lines(self, rank: int, round_: int, start: int, count: int) -> Any:
        """Lines ``start`` to ``start + count`` of ``rank``'s slot for ``round_``."""
        start += (round_ % self.slots) * self.lines_per_slot
        return self.line_views[rank][start : start + count]

    def reserve(self, count: int) -> int:
        """Number the ``count`` rounds of one collective, when it is planned; returns the first.

        As the direct windows' rounds (:meth:`DirectWindows.reserve`): every rank plans its collectives in the same
        order, so every rank gives the same numbers to the same rounds.
        """
        first = self.rounds + 1
        self.rounds += count
        return first

    def close(self) -> None:
        self.windows.close()
