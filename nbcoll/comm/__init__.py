"""Communicators and peer transports: how bytes move between ranks.

Example::

    import nbcoll
    comm = nbcoll.init()                 # over MPI.COMM_WORLD
    comm.send(x, peer=1)                 # ipc inside a node, mpi across nodes

See :mod:`nbcoll.comm.communicator` for the API and :mod:`nbcoll.comm.connection` for the FIFO protocol.
"""

from nbcoll.comm.communicator import NOCOLOR, Communicator, SingleRankWarning, init
from nbcoll.comm.config import CommConfig
from nbcoll.comm.counters import Counters, PeerCounters
from nbcoll.comm.errors import (
    CommAbortedError,
    CommError,
    CommMismatchError,
    CommPeerLostError,
    CommTimeoutError,
)

__all__ = [
    "NOCOLOR",
    "CommAbortedError",
    "CommConfig",
    "CommError",
    "CommMismatchError",
    "CommPeerLostError",
    "CommTimeoutError",
    "Communicator",
    "Counters",
    "PeerCounters",
    "SingleRankWarning",
    "init",
]
