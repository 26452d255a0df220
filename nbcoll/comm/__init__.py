"""Communicators and peer transports: how bytes move between ranks.

Example::

    import nbcoll
    comm = nbcoll.init()                 # over MPI.COMM_WORLD
    comm.send(x, peer=1)                 # ipc inside a node, mpi across nodes

    outs = nbcoll.comm.loopback.run(4, lambda comm: comm.all_reduce(x))   # 4 ranks as threads, no mpiexec

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
from nbcoll.comm.loopback import Loopback, loopback  # the function: nbcoll.comm.loopback(4), .run(4, fn)
from nbcoll.comm.point_to_point import P2POp

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
    "Loopback",
    "P2POp",
    "PeerCounters",
    "SingleRankWarning",
    "init",
    "loopback",
]
