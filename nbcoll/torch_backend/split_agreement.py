"""Uneven all-to-all's sizes, agreed by every rank before any byte moves.

An all-to-all with split sizes runs as one group of sends and receives (nbcoll's ``all_to_all`` has equal blocks).
A refusal on one rank (split sizes that do not add up, a tensor nbcoll cannot hold), or two ranks that disagree on
a pair's block (rank 0 sends 3 elements to rank 1, which expects 2), would otherwise reach the peers only as their
receive's timeout. So every rank first all-gathers one row::

    row[r] = [ok, send sizes to rank 0 .. n-1, receive sizes from rank 0 .. n-1]    (int64, 2n + 1 values)

and every rank reads the same table, so all of them raise together, before sending anything, or none does.
The price is one small all-gather per uneven call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nbcoll import memory
from nbcoll.comm.communicator import Communicator


def agree_on_sizes(
    comm: Communicator, call: str, sends: Sequence[int], recvs: Sequence[int], refusal: BaseException | None
) -> None:
    """Raise on every rank if any rank refused ``call`` or a pair's sizes differ; return on every rank otherwise.

    ``sends[p]`` / ``recvs[p]``: elements this rank sends to / expects from rank ``p``; ``refusal``: this rank's own
    error (then its sizes are not read), re-raised here once every rank knows of it.

    >>> import nbcoll
    >>> comm = nbcoll.init()
    >>> agree_on_sizes(comm, "all_to_all_single", [3], [3], None)        # one rank: its block to itself
    >>> agree_on_sizes(comm, "all_to_all_single", [3], [2], None)
    Traceback (most recent call last):
    ...
    ValueError: nbcoll backend: all_to_all_single: rank 0 sends 3 elements to rank 0, which expects 2
    >>> comm.destroy()
    """
    n = comm.size
    row = np.zeros(2 * n + 1, np.int64)
    if refusal is None:
        row[0], row[1 : n + 1], row[n + 1 :] = 1, sends, recvs
    gathered = memory.zeros(n * row.size, np.int64)
    comm.all_gather(memory.to_device(row), gathered)
    table = memory.to_host(gathered).reshape(n, row.size)
    refused = [r for r in range(n) if table[r, 0] == 0]
    if refusal is not None:
        raise refusal
    if refused:
        ranks = ", ".join(map(str, refused))
        raise ValueError(f"nbcoll backend: {call} was refused on rank {ranks}; nothing was sent or received here")
    for p in range(n):
        for q in range(n):
            sent, expected = table[p, 1 + q], table[q, 1 + n + p]
            if sent != expected:
                raise ValueError(
                    f"nbcoll backend: {call}: rank {p} sends {sent} elements to rank {q}, which expects {expected}"
                )
