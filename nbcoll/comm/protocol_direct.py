"""The direct protocol: the one-shot primitives over the peers' windows and registered buffers, read in place.

When every rank is on one machine and reached over ipc, the peers' data are not sent at all, as NCCL's one-shot
kernels read their peers' buffers over NVLink (:mod:`nbcoll.comm.window`). A buffer from ``comm.alloc()`` is
*registered*: every peer has mapped it, so it is *lent*, read in place, and each byte is copied once per hop,
straight into the reader's output. Any other buffer is staged: its owner copies each piece into its own *window*,
which every peer has mapped, and the peers read the window. The primitives' names are the other protocols'
(:mod:`nbcoll.comm.protocol_simple`); here each is one step of a *round*, flagged ``DIRECT``
(:mod:`nbcoll.comm.window_step`)::

    send(lo, hi)              direct_send: lend local, or stage local[q*b + lo : q*b + hi] for each peer q; posted
    copy_send(lo, hi)         direct_copy_send: the same, then our own block into out (direct_send in place)
    recv(lo, hi)              direct_recv: out[p*B + lo : ...] = the piece p posted, read in place;  done
    recv_reduce_copy(lo, hi)  direct_recv_reduce_copy: out[lo:hi] = op(every rank's piece), in rank order;  done
    release()                 direct_release: wait until no peer still reads what this rank lent

A large message goes in pieces that take the window's two halves in turn, so that an owner stages one while its
peers still read the last (:func:`window_rounds`). The rounds are numbered when the collective is planned
(``reserve``, as the object is bound), not when its steps run: with two collectives in flight, the ranks may
take their steps in different orders, but they plan them in the same one.

A broadcast root, which has nothing to read, writes a share of each piece straight into every reader's
registered output instead (NCCL's direct write), so that its core copies too (:meth:`DirectProtocol.copy_send`).

Example::

    prims = DirectProtocol(ctx, x, y, x.size, op="sum")        # ctx.windows: the direct windows
    for lo, hi in prims.pieces:                                # its rounds, numbered now
        steps = [*prims.send(lo, hi), *prims.recv_reduce_copy(lo, hi)]
"""

from __future__ import annotations

from typing import Any, NamedTuple

from nbcoll.comm.primitives import COPY, DIRECT, POST, RECV, REDUCE, SEND, Flag
from nbcoll.comm.protocol_simple import OneShot, spans

PIECE_BYTES = 1 << 20
"""A one-shot collective over the windows goes in rounds of this many bytes (per block) at most: small enough
that a piece being staged and the one being read stay in a core's caches, large enough that a round's two waits
cost little beside its copies. On the CPU the size also picks how the C library copies: glibc copies from 2 KiB
up to its ``rep_movsb_stop_threshold`` (the L2 cache's size on AMD cores, 1 MiB on the machine of the Performance
page) with one ``rep movsb``, and larger blocks with vector loops. There, ``rep movsb`` reads shared pages (a
registered buffer, a window) slowly: with two ranks copying at once, pieces of 512 KiB took up to twice the time
of pieces of 1 MiB (a 64 MiB all-gather 14-16 ms against 8-10), in the same launch
(``benchmarks/lab/NOTES.md``). On a GPU a piece is one kernel launch, and 1 MiB keeps its blocks busy. Each
collective may ask for other pieces (:mod:`nbcoll.comm.algorithms.direct`)."""


def window_bytes(buffsize: int, nranks: int) -> int:
    """Bytes of each rank's window: ``NBCOLL_BUFFSIZE`` (``buffsize``) for every two ranks.

    An all-to-all's round stages one piece for each reader in one half of the window, so a window of a fixed size
    would cut its pieces as the ranks grow: at 4 ranks, 4 MiB windows gave pieces of 512 KiB, and the all-to-all
    of 16 and 64 MiB with registered buffers took 1.4-2x the time it took with 8 MiB windows and pieces of 1 MiB,
    in the same launch (``benchmarks/lab/windows.py``). With ``NBCOLL_BUFFSIZE`` for every two ranks, the pieces stay
    as large as at 2 ranks.
    """
    return buffsize * ((nranks + 1) // 2)


def piece_elems(itemsize: int, window_bytes: int, piece_bytes: int = PIECE_BYTES) -> int:
    """Elements per round (per block) of a one-shot collective over ``window_bytes`` of window (per block):
    ``piece_bytes``, or half the window if that is less, since the rounds take its two halves in turn. The tuner
    counts the rounds by the same rule."""
    return max(1, min(piece_bytes, window_bytes // 2) // itemsize)


class WindowRound(NamedTuple):
    """One round of a one-shot collective over the windows: elements ``[lo, hi)`` (of each block), its number,
    where a staged chunk lies in the window (``at``, bytes), and how many rounds back its post must wait for the
    peers to be done (``after``: the last round staged in the same bytes)."""

    number: int
    lo: int
    hi: int
    at: int
    after: int


def window_rounds(windows: Any, count: int, itemsize: int, blocks: int, piece_bytes: int = PIECE_BYTES
                  ) -> list[WindowRound]:  # fmt: skip
    """The rounds of ``count`` elements (per block) of a one-shot collective, numbered now (``reserve``).

    A round's pieces (:func:`piece_elems`; ``blocks`` of them when each reader has its own) fill at most half the
    window, and the rounds take the two halves in turn: a rank stages round ``k + 1`` while its peers still read
    round ``k``, waiting only for them to be done with round ``k - 1`` (``after = 2``). The first round waits for
    every round before it (``after = 1``), whatever an earlier collective staged where. A window too small for two
    halves of one element per block (a few bytes) takes every round whole, each waiting for the one before.
    """
    elems = piece_elems(itemsize, windows.nbytes // blocks, piece_bytes)
    cut = spans(count, elems)
    first, half = windows.reserve(len(cut)), blocks * elems * itemsize
    two = 2 * half <= windows.nbytes
    return [WindowRound(first + i, lo, hi, (i % 2) * half if two else 0, 2 if i and two else 1)
            for i, (lo, hi) in enumerate(cut)]  # fmt: skip


class DirectProtocol(OneShot):
    """The one-shot primitives over the direct windows (``ctx.windows``), each a step of a numbered round.

    Example::

        prims = DirectProtocol(ctx, x, y, x.size, op="sum")
        steps = [*prims.send(0, 64), *prims.recv_reduce_copy(0, 64), *prims.release()]

    ``piece_bytes``: the most a round moves per block (:data:`PIECE_BYTES` unless the collective asks for other).
    """

    per_peer_blocks = True

    def __init__(self, ctx: Any, local: Any, out: Any, count: int, **shape: Any) -> None:
        super().__init__(ctx, local, out, count, **shape)
        self.windows, root = ctx.windows, self.root
        # A broadcast root from three ranks on lends a large plain input by its address (copy_send says why); a
        # fold's input never is (Prims: the kernel's copy would be a copy more).
        by_address = root is None or (root == self.rank and self.nranks > 2)
        self.prims = ctx.prims(local, out, op=self.op, post=self.post, by_address=by_address)
        blocks = 1 if self.in_block is None else self.nranks
        rounds = window_rounds(self.windows, count, self.prims.itemsize, blocks, self.piece_bytes or PIECE_BYTES)
        self.pieces = [(r.lo, r.hi) for r in rounds]
        self.rounds = {r.lo: r for r in rounds}  # each piece's round, by where it starts
        self.own = self._copies_own()
        # where a broadcast reader's output is registered, if it is: then the root writes its share into it
        self.target = self.windows.find(out) if root is not None and root != self.rank else None
        self.in_at = self.in_block or 0

    def send(self, lo: int, hi: int) -> list[Any]:
        """Post ``local[q*in_block + lo : q*in_block + hi]`` for every peer ``q``: lent in place when ``local`` is
        registered, else copied into this rank's window, once every peer is done with what was staged there."""
        k = self.rounds[lo]
        return [self.windows.step(self.prims, DIRECT | SEND, lo, hi, k.number, in_block=self.in_at, at=k.at,
                                  after=k.after)]  # fmt: skip

    def copy_send(self, lo: int, hi: int) -> list[Any]:
        """:meth:`send`, and this rank's own block into ``out`` (none in place).

        An all-gather's or an all-to-all's post copies its own block while the peers' posts are on their way
        (``direct_copy_send``). A broadcast root posts, copies its input into its output, then writes the tail
        share ``[cut, hi)`` of the piece into every reader's output that is registered (NCCL's direct write): both
        ends' cores copy, 1/n of the piece each. The root stages round ``k + 1`` in the other half of its window
        while the readers still copy round ``k``, so the two copies of a staged byte overlap. At two ranks that
        pipeline keeps both cores copying, and the root never lends a large plain input by its address (the
        kernel's copy, alone on the reader's core, took 1.2-2.1x the staged time from 4 MiB up); from three ranks
        on it does, since a root that stages every piece for all its readers is what they wait for (the staged
        broadcast took 2.8-3.1x the time of the kernel's copies at 4 ranks, 4-64 MiB; ``NBCOLL_CMA_BYTES``).
        """
        if self.root is not None:
            k, cut = self.rounds[lo], hi - (hi - lo) // self.nranks  # the root's share: [cut, hi)
            copy = [self.prims.copy(lo, hi)] if self.own else []
            return [*self.send(lo, hi), *copy, self.windows.write_shares(self.prims, cut, hi, k.number)]
        if not self.own:
            return self.send(lo, hi)
        k = self.rounds[lo]
        return [self.windows.step(self.prims, DIRECT | COPY | SEND, lo, hi, k.number, in_block=self.in_at,
                                  out_block=self.out_block, at=k.at, after=k.after)]  # fmt: skip

    def recv(self, lo: int, hi: int) -> list[Any]:
        """``out[p*out_block + lo : ...] = local of p [me*in_block + lo : ...]`` for every source ``p``, read in
        place (or from the window it was staged in); then this rank is done reading the round.

        A broadcast reader first opens its output to the root's write when it is registered (``direct_open``),
        and copies all but the root's share; else it copies the whole piece.
        """
        k = self.rounds[lo]
        where = {"sources": list(self.sources), "out_block": self.out_block, "in_block": self.in_at, "at": k.at}
        if self.root is None:
            return [self.windows.step(self.prims, DIRECT | RECV | COPY, lo, hi, k.number, **where)]
        cut = hi - (hi - lo) // self.nranks
        opened = self.windows.open_output(self.prims, cut, hi, k.number, self.root, self.target)
        return [opened, self.windows.step(self.prims, DIRECT | RECV | COPY, lo, hi if self.target is None else cut,
                                          k.number, **where)]  # fmt: skip

    def recv_reduce_copy(self, lo: int, hi: int) -> list[Any]:
        """``out[lo:hi] = op(local of 0 [me*in_block + lo : ...], ..., local of n-1 [...])``, read in place (or
        from the windows), in rank order; then this rank is done reading the round."""
        k, flags = self.rounds[lo], DIRECT | RECV | REDUCE | COPY | (POST if self.post is not None else Flag(0))
        return [self.windows.step(self.prims, flags, lo, hi, k.number, in_block=self.in_at, at=k.at)]

    def release(self) -> list[Any]:
        """The collective's last step, where this rank lent its input (or opened its output to the root's write):
        return only when no peer still reads (or writes) it."""
        lent = self.prims.lent is not None or self.target is not None
        return [self.windows.release(self.prims)] if lent else []
