"""Which ranks share a node, and which transport joins each pair of ranks.

Ranks that share a machine are found with ``Split_type(COMM_TYPE_SHARED)``; they can map each other's memory.
``NBCOLL_RANKS_PER_NODE=k`` splits every machine into pretend nodes of k consecutive ranks, so that the paths
between nodes are exercised on one machine. The transport of a pair is ``ipc`` inside a node and ``mpi``
across nodes, unless ``NBCOLL_TRANSPORT`` forces one.

Example::

    topo = Topology(rank=1, node_keys=[(0, 0), (0, 0), (0, 1), (0, 1)], machine_keys=[0, 0, 0, 0])
    topo.node, topo.local_rank, topo.local_size     # (0, 1, 2)
    topo.transport_to(2)                            # "mpi": rank 2 is on the other (pretend) node
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Topology:
    """The node of every rank, and the transport this rank uses to reach each peer.

    ``node_keys[r]`` identifies the (possibly pretend) node of rank ``r``; ``machine_keys[r]`` the machine
    whose shared memory rank ``r`` can map. Nodes are numbered in order of their first rank.
    """

    def __init__(
        self,
        rank: int,
        node_keys: Sequence[Any],
        machine_keys: Sequence[Any],
        forced_transport: str | None = None,
    ) -> None:
        self.rank = rank
        self.size = len(node_keys)
        numbering: dict[Any, int] = {}
        self.node_of = [numbering.setdefault(key, len(numbering)) for key in node_keys]
        self.nnodes = len(numbering)
        self.machine_keys = list(machine_keys)
        self.forced_transport = forced_transport
        self.local_ranks = [r for r in range(self.size) if self.node_of[r] == self.node]
        self.machine_ranks = [r for r in range(self.size) if self.same_machine(r)]
        if forced_transport == "ipc":
            elsewhere = [r for r in range(self.size) if not self.same_machine(r)]
            if elsewhere:
                raise ValueError(
                    f"NBCOLL_TRANSPORT=ipc: ranks {elsewhere} are on another machine than rank {rank}; "
                    "ipc needs shared memory, so it can only join ranks of one machine"
                )

    @property
    def node(self) -> int:
        return self.node_of[self.rank]

    @property
    def local_rank(self) -> int:
        return self.local_ranks.index(self.rank)

    @property
    def local_size(self) -> int:
        return len(self.local_ranks)

    def same_machine(self, peer: int) -> bool:
        return self.machine_keys[peer] == self.machine_keys[self.rank]

    def transport_to(self, peer: int) -> str:
        """``"ipc"`` or ``"mpi"``: the transport of the connection between this rank and ``peer``."""
        if self.forced_transport is not None:
            return self.forced_transport
        return "ipc" if self.node_of[peer] == self.node else "mpi"

    def transports(self) -> set[str]:
        """The transports of every pair of ranks, not only this rank's: the same set on every rank."""
        if self.size == 1:
            return set()
        if self.forced_transport is not None:
            return {self.forced_transport}
        used = set()
        if self.nnodes < self.size:  # some node holds two ranks
            used.add("ipc")
        if self.nnodes > 1:
            used.add("mpi")
        return used

    def describe(self) -> str:
        peers = ", ".join(f"{p}:{self.transport_to(p)}" for p in range(self.size) if p != self.rank) or "none"
        return (
            f"rank {self.rank} of {self.size}, node {self.node} of {self.nnodes} "
            f"(local rank {self.local_rank} of {self.local_size}); peers {peers}"
        )
