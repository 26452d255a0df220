"""Bytes and chunks moved, per peer and in total: what a communicator really sent.

Example::

    comm.reset_counters()
    comm.send(x, peer=1)
    c = comm.counters
    c.bytes_sent, c[1].chunks_sent          # total, and to peer 1
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

FIELDS = ("bytes_sent", "bytes_received", "chunks_sent", "chunks_received", "bytes_copied")


@dataclass
class PeerCounters:
    """What moved between this rank and one peer since the last reset.

    >>> import nbcoll
    >>> comm = nbcoll.init()
    >>> comm.peer_counters(0)                        # this rank's own entry: nothing moves to itself
    PeerCounters(bytes_sent=0, bytes_received=0, chunks_sent=0, chunks_received=0, bytes_copied=0)
    >>> comm.destroy()
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    chunks_sent: int = 0
    chunks_received: int = 0
    bytes_copied: int = 0
    """Bytes this rank's copies and folds moved into memory the peer reads (its FIFO slot) or out of memory the
    peer wrote (a slot, a window, or its registered buffer read in place): a FIFO hop costs two copies, one at
    each end, a direct hop one. This rank's own entry counts copies within it (its own block, into its window)."""


def charge_sent(counters: list[PeerCounters], nbytes: int) -> None:
    """One chunk of ``nbytes`` sent to each of these peers (a step that charges the same peers on every run keeps
    their counters: a small replayed collective pays for every call it makes)."""
    for pc in counters:
        pc.bytes_sent += nbytes
        pc.chunks_sent += 1


def charge_copied(counters: list[PeerCounters], nbytes: int) -> None:
    """``nbytes`` copied out of memory each of these peers wrote, or into memory it reads (a rank's own entry counts
    the copies within it)."""
    for pc in counters:
        pc.bytes_copied += nbytes


def charge_read(counters: list[PeerCounters], nbytes: int) -> None:
    """One chunk of ``nbytes`` received from each of these peers by copying or folding it out of memory the peer
    wrote (a direct read): a copy and a receipt at once."""
    for pc in counters:
        pc.bytes_copied += nbytes
        pc.bytes_received += nbytes
        pc.chunks_received += 1


class Counters:
    """A snapshot: ``counters[peer]`` is one peer's :class:`PeerCounters`; attributes give the totals.

    Example::

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> c = comm.counters
        >>> c.bytes_sent == sum(c[p].bytes_sent for p in c.peers)
        True
        >>> comm.destroy()
    """

    def __init__(self, per_peer: dict[int, PeerCounters]) -> None:
        self.per_peer = {peer: dataclasses.replace(pc) for peer, pc in sorted(per_peer.items())}

    @property
    def peers(self) -> list[int]:
        """The ranks that have an entry, in increasing order.

        >>> from nbcoll.comm import Counters, PeerCounters
        >>> Counters({3: PeerCounters(), 1: PeerCounters()}).peers
        [1, 3]
        """
        return list(self.per_peer)

    def __getitem__(self, peer: int) -> PeerCounters:
        return self.per_peer.get(peer, PeerCounters())

    def _total(self, name: str) -> int:
        return sum(getattr(pc, name) for pc in self.per_peer.values())

    @property
    def bytes_sent(self) -> int:
        """Bytes sent to every peer together.

        >>> from nbcoll.comm import Counters, PeerCounters
        >>> Counters({1: PeerCounters(bytes_sent=64), 2: PeerCounters(bytes_sent=32)}).bytes_sent
        96
        """
        return self._total("bytes_sent")

    @property
    def bytes_received(self) -> int:
        """Bytes received from every peer together.

        >>> from nbcoll.comm import Counters, PeerCounters
        >>> Counters({1: PeerCounters(bytes_received=8)}).bytes_received
        8
        """
        return self._total("bytes_received")

    @property
    def chunks_sent(self) -> int:
        """FIFO chunks sent to every peer together: one message of many bytes is several chunks.

        >>> from nbcoll.comm import Counters, PeerCounters
        >>> Counters({1: PeerCounters(chunks_sent=2), 2: PeerCounters(chunks_sent=3)}).chunks_sent
        5
        """
        return self._total("chunks_sent")

    @property
    def chunks_received(self) -> int:
        """FIFO chunks received from every peer together.

        >>> from nbcoll.comm import Counters, PeerCounters
        >>> Counters({1: PeerCounters(chunks_received=4)}).chunks_received
        4
        """
        return self._total("chunks_received")

    @property
    def bytes_copied(self) -> int:
        """Bytes copied or folded, every peer's entry and this rank's own together (see :class:`PeerCounters`).

        >>> from nbcoll.comm import Counters, PeerCounters
        >>> Counters({0: PeerCounters(bytes_copied=8), 1: PeerCounters(bytes_copied=16)}).bytes_copied
        24
        """
        return self._total("bytes_copied")

    def as_dict(self) -> dict:
        """The totals and every peer's counters as plain dicts (for JSON or a table).

        >>> from nbcoll.comm import Counters, PeerCounters
        >>> Counters({1: PeerCounters(bytes_sent=8, chunks_sent=1)}).as_dict()["total"]
        {'bytes_sent': 8, 'bytes_received': 0, 'chunks_sent': 1, 'chunks_received': 0, 'bytes_copied': 0}
        """
        totals = {name: self._total(name) for name in FIELDS}
        return {"total": totals, "per_peer": {p: dataclasses.asdict(pc) for p, pc in self.per_peer.items()}}

    def __repr__(self) -> str:
        totals = ", ".join(f"{name}={self._total(name)}" for name in FIELDS)
        return f"Counters({totals}, peers={self.peers})"
