"""The ``direct_*`` primitives: the same steps as :mod:`nbcoll.comm.primitives`' names, reading and writing the
peers' buffers in place (:mod:`nbcoll.comm.window`) instead of FIFO slots, as NCCL's direct primitives do.

:class:`DirectPrims` is the half of :class:`~nbcoll.comm.primitives.Prims` a one-shot algorithm calls
(:mod:`nbcoll.comm.algorithms.direct`); each method builds its step through the communicator's windows, bound to
the same buffers, peers and op::

    direct_send(lo, hi, k)                     post local[lo:hi] for round k: lend it, or copy it into the window
    direct_copy_send(lo, hi, k, out_block)     post as direct_send does, then copy this rank's own block into out
    direct_recv(lo, hi, k, sources)            out[lo:hi] = local of p [lo:hi], read in place, for p in sources
    direct_recv_reduce_copy(lo, hi, k)         out[lo:hi] = op(local of 0 [lo:hi], ..., local of n-1 [lo:hi])
    direct_open(lo, hi, k, root, target)       let the root write out[lo:hi] in round k, if out is registered
    direct_write(lo, hi, k)                    out of p [lo:hi] = local[lo:hi], for every peer p that opened it
    direct_release()                           wait until no peer reads what this rank lent (or writes its out)

Example::

    prims = ctx.prims(x, out, op="sum")                 # ctx.windows: the direct windows
    step = prims.direct_recv_reduce_copy(0, 64, round_)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbcoll.comm.step_flags import COPY, DIRECT, RECV, REDUCE, SEND


class DirectPrims:
    """The ``direct_*`` primitives of a :class:`~nbcoll.comm.primitives.Prims` (a mixin; it sets ``windows`` and
    ``_post``).

    >>> from nbcoll.comm.primitives import Prims
    >>> issubclass(Prims, DirectPrims)
    True
    """

    windows: Any
    _post: Any  # POST when the op has a last step (avg's division), else no flag

    def direct_send(self, lo: int, hi: int, round_: int, in_block: int = 0, at: int = 0, after: int = 1) -> Any:
        """Post ``local[q*in_block + lo : q*in_block + hi]`` for every peer ``q``: lent in place when ``local`` is
        registered, else copied into this rank's window from byte ``at``, once every peer is done with round
        ``round_ - after`` (the last one staged there). Peers read it in round ``round_``."""
        return self.windows.step(self, DIRECT | SEND, lo, hi, round_, in_block=in_block, at=at, after=after)

    def direct_copy_send(self, lo: int, hi: int, round_: int, out_block: int, in_block: int = 0, at: int = 0,
                         after: int = 1) -> Any:  # fmt: skip
        """:meth:`direct_send`, then ``out[me*out_block + lo : ...] = local[me*in_block + lo : ...]``: this rank's
        own block, copied while the peers' posts are on their way (an all-gather's, an all-to-all's)."""
        return self.windows.step(
            self, DIRECT | COPY | SEND, lo, hi, round_, in_block=in_block, out_block=out_block, at=at, after=after
        )

    def direct_recv(self, lo: int, hi: int, round_: int, sources: Sequence[int], out_block: int = 0,
                    in_block: int = 0, at: int = 0) -> Any:  # fmt: skip
        """``out[p*out_block + lo : ...] = local of p [me*in_block + lo : ...]`` for every ``p`` in ``sources``,
        read in place (or from byte ``at`` of a window it was staged in); then this rank is done reading in round
        ``round_`` (also with no source)."""
        where = {"sources": list(sources), "out_block": out_block, "in_block": in_block, "at": at}
        return self.windows.step(self, DIRECT | RECV | COPY, lo, hi, round_, **where)

    def direct_recv_reduce_copy(self, lo: int, hi: int, round_: int, in_block: int = 0, at: int = 0) -> Any:
        """``out[lo:hi] = op(local of 0 [me*in_block + lo : ...], ..., local of n-1 [...])``, read in place (or from
        byte ``at`` of a window), in rank order (``in_block``: a reduce-scatter folds this rank's block of every
        rank's input)."""
        flags = DIRECT | RECV | REDUCE | COPY | self._post
        return self.windows.step(self, flags, lo, hi, round_, in_block=in_block, at=at)

    def direct_open(self, lo: int, hi: int, round_: int, root: int, target: tuple[int, int] | None) -> Any:
        """Open ``out[lo:hi]`` to ``root``'s write in round ``round_`` when ``out`` is registered (``target``, from
        ``windows.find(out)``); else say it is closed. Either way ``root`` learns that this rank has come."""
        return self.windows.open_output(self, lo, hi, round_, root, target)

    def direct_write(self, lo: int, hi: int, round_: int) -> Any:
        """``out of p [lo:hi] = local[lo:hi]`` for every peer ``p`` that opened its output in round ``round_``
        (NCCL's direct write); then this rank is done with the round."""
        return self.windows.write_shares(self, lo, hi, round_)

    def direct_release(self) -> Any:
        """The collective's last step: return only when no peer still reads what this rank lent."""
        return self.windows.release(self)
