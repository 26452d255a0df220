"""The LL step on the ``numpy`` backend, compiled (``NBCOLL_LL_COMPILED=1``): a CPU fast path.

An :class:`~nbcoll.comm.ll_step.LLStep` launches :mod:`nbcoll.kernels.ll`'s kernels (their NumPy references on the
``numpy`` backend), a segment and a source at a time. :class:`CompiledLLStep` is the same step whose write, poll
and own-block copy are the compiled loops of :mod:`nbcoll.kernels.ll_host` instead: one call writes every
segment, one call polls every source and puts the words of a complete one where they go (the output block
itself, for a copy of whole words). There a small collective's time goes to the Python around a few lines, not to
the lines; the price is Numba's start-up, about 0.25 s, at each process's first LL round. The protocol, the
rounds and the results are the base step's: only where the loops run differs.

Example::

    ll = LLBuffers(windows, slots=8, compiled=True)    # its steps are CompiledLLSteps
    prims = LLProtocol(ctx, x, y, x.size, op="sum")    # ctx.ll is ll (nbcoll.comm.protocol_ll)
    step, = [*prims.send(0, 64), *prims.recv_reduce_copy(0, 64)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.comm.ll_step import LLStep, _SlotLines
from nbcoll.comm.primitives import REDUCE_BIT
from nbcoll.kernels import ll_host
from nbcoll.kernels.ll import WORD_BYTES


class CompiledLLStep(LLStep):
    """An LL step whose loops run compiled (:mod:`nbcoll.kernels.ll_host`); the interface of its base.

    ``word_at`` (where the write reads each segment's words), ``dest_at`` (where the poll puts each source's) and
    ``complete`` (the round each source was last seen complete in) are fixed once, in :meth:`_plan`.
    """

    compiled = True

    def _plan(self) -> None:
        """Where the compiled write reads each segment's words, and where the compiled poll puts each source's."""
        ll, p, words = self.ll, self.prims, self.words
        self.word_at = np.array(
            [(s * self.block + self.lo) * p.itemsize // WORD_BYTES if self.whole_words else s * words
             for s in self.stored_segments], np.int64)  # fmt: skip
        self.source_lines = tuple(ll.line_views[peer] for peer in self.sources)
        self.complete = np.zeros(len(self.sources), np.int64)
        self.fills_out = self.receives and self.whole_words and not self.bits & REDUCE_BIT  # a copy, into its block
        if self.fills_out:
            at = [(peer * self.block + self.lo) * p.itemsize // WORD_BYTES for peer in self.sources]
        else:  # a fold reads each source's snapshot
            at = [0] * len(self.sources)
            self.snapshot_rows = tuple(ll.snapshots[peer] for peer in self.sources)
        self.dest_at = np.array(at, np.int64)
        if self.copies_own and self.fills_out:  # this rank's block too, word for word (none in place)
            own = slice(self.ll.rank * self.block + self.lo, self.ll.rank * self.block + self.hi)
            local = slice(self.segment * self.block + self.lo, self.segment * self.block + self.hi)
            self.own_in_place = memory.same_memory(p.out[own], p.local[local])
            self.own_at = own.start * p.itemsize // WORD_BYTES, local.start * p.itemsize // WORD_BYTES

    def _cut(self, slot: int) -> _SlotLines:
        cut = self.cuts[slot]
        if cut is None:  # the base's lines, and the same places as offsets into the buffers
            cut = super()._cut(slot)
            base = slot * self.ll.lines_per_slot
            cut.line_at = np.array([base + s * self.words for s in self.stored_segments], np.int64)
            cut.read_at = base + self.segment * self.words
        return cut

    def _poll(self) -> None:
        """One look at every late source, in one call; ``late`` keeps those still incomplete."""
        dests = (self.prims.out.view(np.uint32),) * len(self.sources) if self.fills_out else self.snapshot_rows
        if ll_host.poll(self.source_lines, self.cut.read_at, self.words, self.round_word, self.complete, self.round,
                        dests, self.dest_at):  # fmt: skip
            self.late = [peer for k, peer in enumerate(self.sources) if self.complete[k] != self.round]
        else:
            self.late = []

    def _copy_own(self) -> None:
        """The words of this rank's own block, unless it is the output's own (a block filled by the poll)."""
        if not self.fills_out:
            super()._copy_own()
            return
        p = self.prims
        self.to_copy_own = False
        if not self.own_in_place:
            dest_at, src_at = self.own_at
            ll_host.copy(p.out.view(np.uint32), dest_at, p.local.view(np.uint32), src_at, self.words)
            p.charge_copy(self.ll.rank, self.nbytes)

    def _write(self) -> None:
        """Every stored segment into this rank's lines in one call; data not of whole words is staged first."""
        p, ll = self.prims, self.ll
        words: Any
        if self.whole_words:
            words = p.local.view(np.uint32)
        else:  # each segment staged into its row (word_at points there)
            for s in self.stored_segments:
                self._segment_words(s)
            words = ll.staging
        ll_host.write(ll.line_views[ll.rank], self.cut.line_at, words, self.word_at, self.words, self.round_word,
                      self.streams)  # fmt: skip
