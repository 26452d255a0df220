"""One step of an LL round (:mod:`nbcoll.comm.ll`): it writes this rank's lines, or polls its peers' lines and
folds or copies their words, or both in that order, and it is rearmed for every round of a replay.

The protocol, the buffers and the order of the rounds are :mod:`nbcoll.comm.ll`'s; a step is what the LL
protocol's primitives return (:mod:`nbcoll.comm.protocol_ll`) and a one-shot algorithm yields
(:func:`nbcoll.comm.algorithms.direct.all_reduce` and the others), with the interface of a
:class:`~nbcoll.comm.primitives.Step`, so the progress queue, the watchdog and replays run it like any other.

The write and the poll are launches of :mod:`nbcoll.kernels.ll`'s kernels (their references on the ``numpy``
backend), a segment and a source at a time. With ``NBCOLL_LL_COMPILED=1`` (a CPU fast path) the ``numpy`` backend
runs them as compiled loops instead: :mod:`nbcoll.comm.ll_compiled`'s step, a subclass of this one.

Example::

    prims = LLProtocol(ctx, x, y, x.size, op="sum")          # nbcoll.comm.protocol_ll, over LLBuffers ctx.ll
    step, = [*prims.send(0, 64), *prims.recv_reduce_copy(0, 64)]   # an all-reduce's round: one step
    while not step.ready():                                  # its store goes first, then the poll
        pass
    step.run()                                               # the fold, in rank order
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.comm.connection import apart_from, copy_device
from nbcoll.comm.primitives import DIRECT, POST_BIT, RECV_BIT, REDUCE_BIT, SEND, SEND_BIT, Flag, Prims, name_of
from nbcoll.kernels import combine as combine_kernels
from nbcoll.kernels import copy as copy_kernels
from nbcoll.kernels import ll as ll_kernels
from nbcoll.kernels.dispatch import resolve
from nbcoll.kernels.ll import LINE_BYTES, WORD_BYTES

if TYPE_CHECKING:
    from nbcoll.comm.ll import LLBuffers
PROBE_ABOVE = 256
"""Segments of more lines than this are polled by their last line first (one thread), then read whole: a load of
every line costs a launch of as many threads, which the simulator runs one by one. A step whose poll has already
found its round incomplete polls the last line first whatever the size: a writer on the CPU stores its lines in
order, so until the last one is there the others need not be checked (on the ``numpy`` backend a check of every
flag costs about 3 us for 1024 lines, a look at one line 0.2 us). Where lines land in any order (a GPU's threads)
the look is only a hint: the check of every flag decides."""


class _Peer:
    """Stands for a peer in traces, where a FIFO step would name its connection."""

    __slots__ = ("peer",)

    def __init__(self, peer: int) -> None:
        self.peer = peer


class _SlotLines:
    """The lines one step touches in one slot of the buffers: cut the first time a round of the step uses that slot,
    then kept, since a replay reruns the step in every slot in turn; a step that runs once cuts only its own."""

    __slots__ = ("own", "lines", "last_lines", "first_lines", "presence", "line_at", "read_at")

    def __init__(self, step: LLStep, slot: int) -> None:
        ll = step.ll
        # each peer's line 0, which says whether that peer has begun a round (what a write waits for)
        self.first_lines = {p: ll.lines(p, slot, 0, 1) for p in ll.others} if step.writes else {}
        self.presence = ll.lines(ll.rank, slot, 0, 1) if step.announces else None
        # what a write stores into: this rank's lines, padded per segment
        self.own = ll.lines(ll.rank, slot, 0, step.segments * step.words) if step.stores else None
        # what a read polls: the step's segment of each source's lines
        self.lines = {p: ll.lines(p, slot, step.segment * step.words, step.words) for p in step.sources}
        self.last_lines = {p: lines[-1:] for p, lines in self.lines.items()}
        self.line_at = self.read_at = None  # the same places as offsets, where a compiled step needs them


class LLStep:
    """One step of an LL round; it has the interface of a :class:`~nbcoll.comm.primitives.Step`.

    * ``DIRECT | SEND``: write ``local[lo:hi]`` into this rank's lines of the round; ready when no peer still
      reads what the slot held (:meth:`_slot_is_free`);
    * ``DIRECT | RECV | REDUCE | COPY``: ready when every peer's lines carry the round; fold in rank order;
    * ``DIRECT | RECV | COPY``: the same wait; copy each peer's words into its block of ``out``. With
      ``announce``, it first writes this rank's presence line, under the same condition as a write; with ``own``,
      it first copies this rank's own block;
    * ``DIRECT | SEND`` with ``RECV``: the write, first thing in the poll, then the read (one step a round).

    ``block``, ``segments`` and ``segment`` place the chunks of an all-to-all (see :meth:`LLBuffers.send`).
    """

    compiled = False  # NBCOLL_LL_COMPILED's steps are nbcoll.comm.ll_compiled.CompiledLLStep
    fills_out = False  # whether the poll puts the words straight into the output (then run() copies none)

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
        sources: list[int] | None = None,
        announce: bool = False,
        own: bool = False,
    ) -> None:
        self.ll, self.prims, self.flags, self.lo, self.hi = ll, prims, flags, lo, hi
        self.block, self.segments, self.segment = block, segments, segment
        self.bits = int(flags)  # tested while running: int tests cost less than Flag ones
        self.nbytes = (hi - lo) * prims.itemsize
        self.words = -(-self.nbytes // WORD_BYTES)
        # data into its lines; reads of its peers' lines
        self.stores, self.receives = bool(self.bits & SEND_BIT), bool(self.bits & RECV_BIT)
        self.probes_first = self.words > PROBE_ABOVE  # a round's first poll looks at the last line first
        self.announces = announce and not self.stores
        self.writes = self.stores or self.announces  # into this rank's lines: data, or a presence line
        self.copies_own = own and self.receives
        self.stores_first = self.stores and self.receives  # the write comes first thing in the poll, not in run()
        sources = list(ll.others) if sources is None else list(sources)
        self.sources = sources if self.receives else []  # whose lines the step reads
        self.reads_everyone = len(self.sources) == len(ll.others)
        self.stored_segments = [s for s in range(segments) if segments == 1 or s != ll.rank]
        self.send = [_Peer(p) for p in ll.others] if self.stores else []
        self.recv = [_Peer(p) for p in self.sources]
        # Each launch's backend half, chosen once: a replay reruns this step on every call
        written = len(self.stored_segments) * self.words * LINE_BYTES  # this step's lines, in bytes
        copies = ll.copies  # a CopyPolicy where a CPU fast path may stream the lines (nbcoll.comm.copy_policy)
        self.streams = copies is not None and copies.streams_shared(written)
        self.store_lines = resolve(ll_kernels.store_lines) if copies is None else copies.store_lines(written)
        self.load_lines = resolve(ll_kernels.load_lines)
        self.first_round = resolve(ll_kernels.first_round)
        self.copy_chunk = resolve(copy_kernels.copy_chunk)
        self.cuts: list[_SlotLines | None] = [None] * ll.slots  # each slot's lines, cut when a round first needs them
        if self.receives:  # each source's words where its poll leaves them, and as the data they are
            self.snapshots = {p: ll.snapshots[p][: self.words] for p in self.sources}
            self.received = {p: w.view(np.uint8)[: self.nbytes].view(prims.dtype) for p, w in self.snapshots.items()}
        self.whole_words = prims.itemsize % WORD_BYTES == 0  # else each segment is staged, padded to whole words
        self._plan()
        self.rearm(round_)

    def _plan(self) -> None:
        """What a compiled step prepares before its first round (:mod:`nbcoll.comm.ll_compiled`); nothing here."""

    def rearm(self, round_: int) -> None:
        """Make this step new again, for ``round_``: a replayed collective (:mod:`nbcoll.comm.replay`) reruns it."""
        self.round = round_
        self.flag = ll_kernels.flag_of(round_)
        self.round_word = self.flag >> 32  # the flag as first_round returns it
        self.slot = round_ % self.ll.slots
        self.unseen = self.ll.others if self.writes else []  # peers not yet seen to be done with the slot's data
        self.late = self.sources  # peers whose lines of this round have not all come
        self.to_store = self.stores_first
        self.to_announce = self.announces
        self.to_copy_own = self.copies_own
        self.cut = self._cut(self.slot)  # the round's lines: this rank's to write, each source's to poll
        self.probing = self.probes_first  # poll the last line first (see PROBE_ABOVE)

    def _cut(self, slot: int) -> _SlotLines:
        cut = self.cuts[slot]
        if cut is None:
            cut = self.cuts[slot] = _SlotLines(self, slot)
        return cut

    @property
    def numbering(self) -> LLBuffers:
        """What numbers this step's rounds (``reserve``): the LL buffers."""
        return self.ll

    @property
    def name(self) -> str:
        if self.stores_first:  # a write, then a read: "ll_send_recv_reduce_copy", "ll_send_recv"
            return "ll_send_" + name_of(self.flags & ~(DIRECT | SEND))
        return "ll_" + name_of(self.flags & ~DIRECT)

    @property
    def span(self) -> tuple[int, int]:
        return self.lo, self.hi

    @property
    def peers(self) -> list[int]:
        return self.ll.others if self.stores else self.sources

    def ready(self) -> bool:
        """A write: no peer still reads the data this slot held (every peer has begun the round after them). A
        read: poll every peer still late; a load that finds every line of the round keeps their words. A read that
        writes (its data, or a presence line that announces it) does so first, as soon as the write may go, and
        one that copies its own block does that next: both overlap the wait for the peers."""
        if self.unseen and not self._slot_is_free():
            return False
        if self.to_store:
            self._store()
            self.to_store = False
        if self.to_announce:
            self._announce()
        if self.to_copy_own:
            self._copy_own()
        if not self.late:
            return True
        self._poll()
        if self.late:
            self.probing = self.words > 1  # the writer is still at it: from now on look at its last line first
            return False
        if self.reads_everyone and self.ll.seen < self.round:
            self.ll.seen = self.round
        return True

    def _slot_is_free(self) -> bool:
        """Whether no peer still reads what this rank's slot of the round last held (round ``r - S``): every peer
        has begun round ``r - S + 1``, or that slot held nothing a peer reads (a presence line)."""
        ll = self.ll
        after = self.round - ll.slots + 1  # the round that follows the slot's last one
        if ll.seen < after and ll.slot_is_read[self.slot]:  # ask each peer's line 0 of round `after`
            first_lines = self._cut(after % ll.slots).first_lines
            self.unseen = [peer for peer in self.unseen if not self._began(first_lines[peer], after)]
            if self.unseen:
                return False
            ll.seen = after
        self.unseen = []
        return True

    def _announce(self) -> None:
        """``line 0 of lines(me) = round``, no data: this rank has begun the round, so it is done reading the one
        before (a broadcast's reader; see the module's docstring)."""
        self.ll.slot_is_read[self.slot] = False
        self.store_lines(self.cut.presence, self.ll.presence_word, self.flag)
        self.to_announce = False

    def _copy_own(self) -> None:
        """This rank's own block of the output, from its input: done before the poll, so it overlaps the wait for
        the peers' lines (an all-gather's or an all-to-all's; nothing to copy in place)."""
        p, lo, hi = self.prims, self.lo, self.hi
        self.to_copy_own = False
        at, start = self.segment * self.block, self.ll.rank * self.block + lo
        dst, src = p.out[start : start + hi - lo], p.local[at + lo : at + hi]
        if self.nbytes and not memory.same_memory(dst, src):
            self.copy_chunk(dst, src)
            p.charge_copy(self.ll.rank, self.nbytes)

    def _began(self, line: Any, round_: int) -> bool:
        """Whether a peer's line 0 carries ``round_`` or a later round: that peer has begun ``round_``."""
        return ll_kernels.began(self.first_round(self.ll.probe, line), round_)

    def _lines_missing(self, peer: int) -> int:
        ll = self.ll
        cut = self.cut
        if self.probing and self.first_round(ll.probe, cut.last_lines[peer]) != self.round_word:
            return 1  # the last line is not there yet: no need to read them all
        return self.load_lines(self.snapshots[peer], cut.lines[peer], self.flag, ll.missing)

    def _poll(self) -> None:
        """One look at every late source; ``late`` keeps those still incomplete."""
        self.late = [peer for peer in self.late if self._lines_missing(peer)]

    def waiting_peers(self) -> list[int]:
        return list(self.unseen or self.late)

    def waiting_for(self) -> str:
        if self.unseen:
            after = self.round - self.ll.slots + 1
            return f"ranks {self.unseen} to begin LL round {after} before this rank writes round {self.round}"
        if self.late:
            return f"ranks {self.late} to write their LL lines of round {self.round}"
        return "nothing (ready)"

    def describe(self) -> str:
        return f"{self.name} of {self.nbytes} bytes, round {self.round}"

    def run(self) -> None:
        """Store this rank's lines (a write alone), or fold every rank's words in rank order, or copy the peers'
        blocks."""
        if not self.receives:
            self._store()
            return
        if not self.bits & REDUCE_BIT:
            self._copy_blocks()
            return
        p, ll, lo, hi = self.prims, self.ll, self.lo, self.hi
        if self.nbytes:  # the fold, here rather than in a helper: the path to the kernel stays short
            dst = p.out[lo:hi]
            at = self.segment * self.block  # where this rank's part of the input starts (a reduce-scatter's block)
            local = p.local[at + lo : at + hi]
            if ll.rank >= 2:  # in place, ours is not the first operand: fold a copy of it
                local = apart_from(dst, local)
            sources = [local if r == ll.rank else self._words_of(r) for r in range(ll.nranks)]
            combine_kernels.fold_into(p.rule, dst, sources)  # unchecked: checked at the call
            if self.bits & POST_BIT:
                p.post(dst)
        self._charge_received()

    def _store(self) -> None:
        p, ll = self.prims, self.ll
        ll.slot_is_read[self.slot] = True
        self._write()
        p.charge_copy(ll.rank, len(self.stored_segments) * self.nbytes)  # into this rank's lines, read by its peers
        for peer in ll.others:
            p.charge(peer, self.nbytes, sent=True)

    def _write(self) -> None:
        """Segment by segment, a launch each (an all-to-all's own segment is read by no one)."""
        lines, words = self.cut.own, self.words
        for s in self.stored_segments:
            self.store_lines(lines[s * words : (s + 1) * words], self._segment_words(s), self.flag)

    def _segment_words(self, s: int) -> Any:
        """Segment ``s`` of the input as whole words: the input itself, or (bytes, half-words) its bytes copied into
        the staging row of segment ``s``, padded."""
        p, words = self.prims, self.words
        chunk = p.local[s * self.block + self.lo : s * self.block + self.hi]
        if self.whole_words:
            return chunk.view(np.uint32)
        staged = self.ll.staging[s * words : (s + 1) * words]
        copy_device(staged.view(np.uint8)[: self.nbytes].view(p.dtype), chunk)
        return staged

    def _words_of(self, peer: int) -> Any:
        return self.received[peer]

    def _copy_blocks(self) -> None:
        p = self.prims
        if self.nbytes and not self.fills_out:  # (a compiled poll has put them in place)
            for peer in self.sources:
                start = peer * self.block + self.lo
                self.copy_chunk(p.out[start : start + self.hi - self.lo], self._words_of(peer))
        self._charge_received()

    def _charge_received(self) -> None:
        for peer in self.sources:
            self.prims.charge_read(peer, self.nbytes)  # out of the lines the peer wrote
