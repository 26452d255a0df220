"""The steps of a one-shot round over the direct windows: post, read in place, write in place, and release.

:mod:`nbcoll.comm.window` holds the memory and the flags; the steps here are what the direct protocol's
primitives return (:mod:`nbcoll.comm.protocol_direct`) and a one-shot algorithm yields, and they have the
interface of a FIFO :class:`~nbcoll.comm.primitives.Step`, so the same operation runs them, traces them and times
them out.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any

from nbcoll.comm.connection import apart_from, synchronize
from nbcoll.comm.counters import charge_copied, charge_read, charge_sent
from nbcoll.comm.errors import CommError, CommPeerLostError
from nbcoll.comm.primitives import COPY_BIT, POST_BIT, REDUCE_BIT, SEND_BIT, Flag, name_of
from nbcoll.kernels import combine as combine_kernels

BY_ADDRESS = -2
"""``lent[r]`` of a rank that lent an unregistered input by its address (``lent_at[r]``): its peers read it out of
its process (:meth:`nbcoll.comm.window.DirectWindows.read_lent`)."""


@dataclass
class _Peer:
    """Stands for a peer in traces, where a FIFO step would name its connection."""

    peer: int


class _FlagWait:
    """What a step that waits on the window flags shares: it is ready when no peer is late (``_late()``)."""

    def _late(self) -> list[int]:
        raise NotImplementedError

    def ready(self) -> bool:
        return not self._late()

    def waiting_peers(self) -> list[int]:
        return self._late()


class _RoundStep(_FlagWait):
    """What every step of a window round shares: a chunk ``[lo, hi)`` of ``prims``'s buffers in round ``round_``,
    renumbered when a replay reruns it."""

    def __init__(self, windows: Any, prims: Any, lo: int, hi: int, round_: int) -> None:
        self.w, self.prims, self.lo, self.hi, self.round = windows, prims, lo, hi, round_
        self.others = [p for p in range(windows.nranks) if p != windows.rank]
        self.nbytes = (hi - lo) * prims.itemsize
        self.span = (lo, hi)

    def rearm(self, round_: int) -> None:
        """Make this step new again, for ``round_``: a replayed collective (:mod:`nbcoll.comm.replay`) reruns it."""
        self.round = round_

    @property
    def numbering(self) -> Any:
        """What numbers this step's rounds (``reserve``): the windows."""
        return self.w

    def describe(self) -> str:
        return f"{self.name} of {self.nbytes} bytes, round {self.round}"


class WindowStep(_RoundStep):
    """One step of a one-shot round, read from its :class:`~nbcoll.comm.primitives.Flag` bits (``b = in_block``,
    ``B = out_block``, ``me`` this rank)::

        DIRECT | SEND                 lend local (registered), or window[q*len] = local[q*b + lo : q*b + hi];  posted
        DIRECT | COPY | SEND          the same; then out[me*B + lo : me*B + hi] = local[me*b + lo : me*b + hi]
        DIRECT | RECV | COPY          for p in sources: out[p*B + lo : p*B + hi] = source(p)[me*b + lo : ...];  done
        DIRECT | RECV | REDUCE | COPY out[lo:hi] = op(source(0), ..., source(n-1)), in rank order;             done
                                      (source(p) = local of p [me*b + lo : me*b + hi]: a reduce-scatter's block)

    ``source(p)`` is peer ``p``'s own buffer when ``p`` lent it (one copy per hop): mapped here when registered,
    else read out of ``p``'s process by the kernel (a copy's source only); otherwise ``p``'s window (the second
    copy of a staged byte), from byte ``at``. A post waits until every peer is done with round
    ``round - after``, the last round staged in the same bytes: the round before for a collective's first round
    (``after = 1``), and the one before that for the others, which take the window's two halves in turn
    (``after = 2``). Every rank ends every round with a receiving step, from no source if it reads nothing (a
    broadcast's root): its ``done`` is what lets the next writer go on. It has the interface of a
    :class:`~nbcoll.comm.primitives.Step` (``ready``, ``run``, ``describe``, ``waiting_for``, ``peers``, ``span``,
    ``nbytes``), so the same operation runs it, traces it and times it out.
    """

    def __init__(self, windows: Any, prims: Any, flags: Flag, lo: int, hi: int, round_: int,
                 sources: list[int] | None = None, out_block: int = 0, in_block: int = 0, at: int = 0,
                 after: int = 1) -> None:  # fmt: skip
        super().__init__(windows, prims, lo, hi, round_)
        self.flags, self.out_block, self.in_block = flags, out_block, in_block
        self.at, self.after = at, after  # where in the window a staged chunk lies; the round last staged there
        self.sources = self.others if sources is None else sources
        self.bits = int(flags)  # tested while running: int tests cost less than Flag ones
        sending = bool(self.bits & SEND_BIT)
        self.send = [_Peer(p) for p in self.others] if sending else []
        self.recv = [] if sending else [_Peer(p) for p in self.sources]
        # What a replay reruns on every call, looked up once: the flags row a wait reads and the ranks it waits
        # for, the counters it charges, and the sources' memory as last found (see source()).
        self.watched = self.others if sending else self.sources
        self.read_counters = prims.counters_of(
            [] if sending else self.others if self.bits & REDUCE_BIT else self.sources
        )
        self.sent_counters = prims.counters_of(self.others if sending else [])
        self.own_counters = prims.counters_of([windows.rank])
        self.views: dict[tuple[int, int, int], Any] = {}

    @property
    def name(self) -> str:
        return name_of(self.flags)

    @property
    def peers(self) -> list[int]:
        return self.watched

    def _awaited(self) -> tuple[Any, int] | None:
        """The flags row this step waits on and the round each watched peer must have reached in it, or ``None``
        when it waits for nobody."""
        if self.bits & SEND_BIT:  # nobody may still read what this rank is about to overwrite
            if self.prims.lent is not None and self.prims.lent_round is not None:
                return None  # lent again in the same collective: the same buffer, nothing overwritten
            return self.w.done, self.round - self.after
        return self.w.posted, self.round

    def _late(self) -> list[int]:
        awaited = self._awaited()
        if awaited is None:
            return []
        row, first = awaited
        return [p for p in self.watched if row[p] < first]

    def ready(self) -> bool:
        """``not self._late()``, without building the list: a replay asks on every call, and a poll many times."""
        awaited = self._awaited()
        if awaited is not None:
            row, first = awaited
            for p in self.watched:
                if row[p] < first:
                    return False
        return True

    def waiting_for(self) -> str:
        late = self._late()
        if not late:
            return "nothing (ready)"
        if self.bits & SEND_BIT:
            return f"ranks {late} to finish reading this rank's window in round {self.round - self.after}"
        return f"ranks {late} to post their data for round {self.round}"

    def _post(self) -> None:
        w, p, me, lo, hi = self.w, self.prims, self.w.rank, self.lo, self.hi
        if p.lent is not None:  # the peers read local itself: nothing to copy
            w.lent[me], w.lent_at[me] = p.lent
            p.lent_round = self.round
        else:
            w.lent[me] = -1
            readers = self.others if self.in_block else [me]  # one block per reader, or one for all
            for q in readers:
                if self.nbytes:
                    start = q * self.in_block + lo
                    p.copy_shared(w.view(me, self.nbytes, p.dtype, self._slot(q)), p.local[start : start + hi - lo])
                    p.charge_copy(me, self.nbytes)
            synchronize()  # the window's bytes land before the flag that announces them
        w.posted[me] = self.round
        charge_sent(self.sent_counters, self.nbytes)

    def _copy_own(self) -> None:
        """This rank's own block of ``out``, copied after the post: the peers may read already, and this rank copies
        while their posts are on their way, instead of after waiting for them (NCCL's ``directCopySend``)."""
        p, me, lo, hi = self.prims, self.w.rank, self.lo, self.hi
        if self.nbytes:
            src, dst = me * self.in_block + lo, me * self.out_block + lo
            p.copy_out(p.out[dst : dst + hi - lo], p.local[src : src + hi - lo])
            charge_copied(self.own_counters, self.nbytes)

    def _slot(self, reader: int) -> int:
        """Where a staged chunk for ``reader`` starts in the window, in bytes."""
        return self.at + (reader * self.nbytes if self.in_block else 0)

    def source(self, rank: int) -> Any:
        """What ``rank`` posted for this rank in this round: its lent buffer, or its window."""
        w, p, me = self.w, self.prims, self.w.rank
        if rank == me and (p.lent is not None or self.in_block):  # our own block: nobody staged it for us
            at = me * self.in_block
            return p.local[at + self.lo : at + self.hi]
        lent = int(w.lent[rank])
        if lent >= 0:  # the same peer buffer call after call, in a replay: its view is kept, not cut again
            key = (rank, lent, int(w.lent_at[rank]))
            view = self.views.get(key)
            if view is None:
                if len(self.views) >= 4 * w.nranks:  # a peer that lends ever new buffers: start afresh
                    self.views.clear()
                view = self.views[key] = w.lent_view(rank, (me * self.in_block + self.lo) * p.itemsize, self.nbytes,
                                                     p.dtype)  # fmt: skip
            return view
        if lent == BY_ADDRESS:  # never in a fold (DirectWindows.lend): it would read some other bytes
            raise CommError(f"rank {me}: {p.call} {self.name} round {self.round}: rank {rank} lent its input by "
                            f"address, which only a copy reads")  # fmt: skip
        return w.view(rank, self.nbytes, p.dtype, self._slot(me))

    def _read_lent(self, rank: int, into: Any) -> None:
        """``into`` = this rank's chunk of what ``rank`` lent by address, read out of its process."""
        w, me = self.w, self.w.rank
        try:
            w.read_lent(rank, (me * self.in_block + self.lo) * self.prims.itemsize, into)
        except OSError as exc:
            what, step = f"rank {me}: {self.prims.call} failed", f"{self.name}, round {self.round}"
            if exc.errno == errno.ESRCH:
                raise CommPeerLostError(f"{what}: peer rank {rank} (pid {w.pids[rank]}) has exited; this rank was "
                                        f"reading its input out of its process ({step})") from exc  # fmt: skip
            raise CommError(f"{what}: reading peer rank {rank}'s input out of its process (pid {w.pids[rank]}; "
                            f"{step}): {exc}") from exc  # fmt: skip

    def run(self) -> None:
        """Post this rank's chunk, or read every source's (a fold, or a copy into each source's block)."""
        if self.bits & SEND_BIT:
            self._post()
            if self.bits & COPY_BIT:
                self._copy_own()
            return
        w, p, lo, hi = self.w, self.prims, self.lo, self.hi
        if self.nbytes and self.bits & REDUCE_BIT:  # fold every rank's chunk, in rank order, into out
            dst = p.out[lo:hi]
            sources = [self.source(rank) for rank in range(w.nranks)]
            if w.rank >= 2:  # in place, ours is not the first operand: fold a copy of it
                sources[w.rank] = apart_from(dst, sources[w.rank])
            combine_kernels.fold_into(p.rule, dst, sources)  # unchecked: checked at the call
            if self.bits & POST_BIT:
                p.post(dst)
        elif self.nbytes:  # copy each source's chunk into its block of out
            for rank in self.sources:
                start = rank * self.out_block + lo
                if w.lent[rank] == BY_ADDRESS:  # one copy, out of the owner's process
                    self._read_lent(rank, p.out[start : start + hi - lo])
                else:
                    p.copy_out(p.out[start : start + hi - lo], self.source(rank))
        synchronize()  # reads finish before the flag lets the owners overwrite their windows
        w.done[w.rank] = self.round
        charge_read(self.read_counters, self.nbytes)


class Release(_FlagWait):
    """The last step of a collective that lent this rank's buffer: wait until every peer has read it.

    The user may overwrite the buffer as soon as the collective returns, so a rank that lent it in round ``k``
    returns only once every peer's ``done`` has reached ``k``. A broadcast reader that opened its output to the
    root's write in round ``k`` waits the same way, until the root is done writing. A rank that lent nothing is
    ready at once.
    """

    name = "direct_release"
    nbytes = 0
    span = (0, 0)
    send: list = []
    recv: list = []

    def __init__(self, windows: Any, prims: Any) -> None:
        self.w, self.prims = windows, prims
        self.others = [p for p in range(windows.nranks) if p != windows.rank]

    @property
    def peers(self) -> list[int]:
        return self.others

    def _late(self) -> list[int]:
        lent = self.prims.lent_round
        return [] if lent is None else [p for p in self.others if self.w.done[p] < lent]

    def ready(self) -> bool:
        """``not self._late()``, without building the list (a replay asks on every call)."""
        lent, done = self.prims.lent_round, self.w.done
        if lent is not None:
            for p in self.others:
                if done[p] < lent:
                    return False
        return True

    def waiting_for(self) -> str:
        late = self._late()
        return f"ranks {late} to finish reading this rank's buffer (round {self.prims.lent_round})" if late else (
            "nothing (ready)")  # fmt: skip

    def describe(self) -> str:
        return f"{self.name} of the buffer lent up to round {self.prims.lent_round}"

    def run(self) -> None:
        self.prims.lent_round = None


class OpenOutput(_RoundStep):
    """A broadcast reader's first step in a round: open ``out[lo:hi]``, its share of the chunk, to the root's
    direct write (NCCL's direct write into a registered receive buffer), or say that it stays closed.

    Open when ``out`` is registered (``comm.alloc``): ``lent[me], lent_at[me]`` say where it lies, and the reader
    copies only the rest of the chunk itself. Closed otherwise (``lent[me] = -1``): the reader copies it all.
    Either way ``posted[me] = round`` tells the root this rank has come. As a send does, it waits until no rank
    still works on the round before, so that ``posted`` never runs ahead of an earlier round. The collective's
    :class:`Release` then waits until the root is done writing.
    """

    name = "direct_open"

    def __init__(self, windows: Any, prims: Any, lo: int, hi: int, round_: int, root: int,
                 target: tuple[int, int] | None) -> None:  # fmt: skip
        super().__init__(windows, prims, lo, hi, round_)
        self.root, self.target = root, target  # where out lies: (registration, byte offset), or None
        self.send, self.recv = [], [_Peer(root)]

    @property
    def peers(self) -> list[int]:
        return self.others

    def _late(self) -> list[int]:
        return [p for p in self.others if self.w.done[p] < self.round - 1]

    def waiting_for(self) -> str:
        late = self._late()
        return f"ranks {late} to finish round {self.round - 1}" if late else "nothing (ready)"

    def run(self) -> None:
        w, p, me = self.w, self.prims, self.w.rank
        if self.target is None:
            w.lent[me] = -1
        else:
            w.lent[me], w.lent_at[me] = self.target
            p.lent_round = self.round  # the root writes into out: the collective ends once it is done
            p.charge(self.root, self.nbytes, sent=False)  # the root's bytes land here without a step of ours
        w.posted[me] = self.round


class WriteShares(_RoundStep):
    """A broadcast root's last step in a round: write ``local[lo:hi]`` into the output of every reader that opened
    it (:class:`OpenOutput`), then say this rank is done with the round.

    The root's core would otherwise sit idle while the readers copy: with its share written by the root, a
    reader copies a part of the chunk less (at 2 ranks, half). Each byte is still copied once per hop. It waits
    until every reader has come to the round, open or not.
    """

    name = "direct_write"

    def __init__(self, windows: Any, prims: Any, lo: int, hi: int, round_: int) -> None:
        super().__init__(windows, prims, lo, hi, round_)
        self.send, self.recv = [_Peer(p) for p in self.others], []

    @property
    def peers(self) -> list[int]:
        return self.others

    def _late(self) -> list[int]:
        return [p for p in self.others if self.w.posted[p] < self.round]

    def waiting_for(self) -> str:
        late = self._late()
        return f"ranks {late} to come to round {self.round}" if late else "nothing (ready)"

    def run(self) -> None:
        w, p, lo, hi = self.w, self.prims, self.lo, self.hi
        if self.nbytes:
            for q in self.others:
                if w.lent[q] >= 0:  # opened: its share goes straight into its output
                    p.copy_out(w.lent_view(q, lo * p.itemsize, self.nbytes, p.dtype), p.local[lo:hi])
                    p.charge_copy(q, self.nbytes)
        synchronize()  # the bytes land before the flag that lets the readers return
        w.done[w.rank] = self.round
