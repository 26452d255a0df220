"""The communicator: a set of ranks, the connections between them, and point-to-point send and receive.

Example::

    import numpy as np, nbcoll
    with nbcoll.init() as comm:                     # every rank of MPI.COMM_WORLD
        x = nbcoll.to_device(np.arange(4, dtype=np.float32))
        if comm.rank == 0:
            comm.send(x, peer=1)
        elif comm.rank == 1:
            comm.recv(x, peer=0)
        halves = comm.split(color=comm.rank % 2)    # two sub-communicators

Connections are built at creation for peers on the same node (ipc) and at first use for the others (mpi).

:class:`Communicator` is built here and answers who is who; each group of its methods lives in a module of its own,
a mixin class the communicator inherits::

    nbcoll/comm/point_to_point.py     send, recv, isend, irecv, batch_isend_irecv, group, drive
    nbcoll/comm/collectives.py        all_reduce, broadcast, reduce, all_gather, ... barrier
    nbcoll/comm/gather_scatter.py     gather, scatter
    nbcoll/comm/peers.py              send_connection, recv_connection, peer_counters, counters, reset_counters
    nbcoll/comm/registered_buffers.py alloc, free
    nbcoll/comm/lifecycle.py          split, dup, shrink, abort, aborted_by, closed, destroy
"""

from __future__ import annotations

import numbers
import os
import threading
import warnings
from typing import Any

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll import memory
from nbcoll.comm.bootstrap import Wiring, bootstrap
from nbcoll.comm.collectives import Collectives
from nbcoll.comm.config import CommConfig
from nbcoll.comm.counters import PeerCounters
from nbcoll.comm.debug import FlightRecorder, Logger
from nbcoll.comm.engine import Engine
from nbcoll.comm.gather_scatter import GatherScatter
from nbcoll.comm.group import Group
from nbcoll.comm.lifecycle import NOCOLOR, Lifecycle  # noqa: F401  (NOCOLOR: importable from here as before)
from nbcoll.comm.peers import Peers
from nbcoll.comm.point_to_point import PointToPoint
from nbcoll.comm.registered_buffers import RegisteredBuffers
from nbcoll.comm.watchdog import Watchdog


class Communicator(PointToPoint, Collectives, GatherScatter, Peers, RegisteredBuffers, Lifecycle):
    """A group of ranks that can send to and receive from each other.

    Example::

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()                   # every rank calls it: one here, four under mpiexec -n 4
        >>> x = nbcoll.to_device(np.full(4, comm.rank + 1.0, np.float32))
        >>> _ = comm.all_reduce(x)                 # in place: the sum over the ranks
        >>> nbcoll.to_host(x)
        array([1., 1., 1., 1.], dtype=float32)
        >>> if comm.size > 1:                      # a ring of sends and receives needs two ranks or more
        ...     y = nbcoll.zeros(4)
        ...     with comm.group():                 # queued, then run together: a ring cannot deadlock
        ...         comm.send(x, (comm.rank + 1) % comm.size)
        ...         comm.recv(y, (comm.rank - 1) % comm.size)
        >>> comm.counters.bytes_sent               # nothing moved on one rank
        0
        >>> comm.destroy()

    Creating one is collective over ``mpi_comm``: every rank of it must call. Use :func:`init`.
    """

    def __init__(self, mpi_comm: Any, config: CommConfig | None = None, *, _node_key: Any = None) -> None:
        self.config = config or CommConfig.from_env()
        rank = mpi_comm.Get_rank()
        self.log = Logger(rank, self.config.debug, self.config.debug_subsys)
        self._wiring: Wiring = bootstrap(mpi_comm, self.config, self.log, node_key=_node_key)
        self.topology = self._wiring.topology
        self.recorder = FlightRecorder(self.config.flight_recorder)
        self._counters: dict[int, PeerCounters] = {}
        self._aborted_by: int | None = None
        self._abort_requests: list[Any] = []  # MPI requests of abort messages
        self._destroyed = False
        machine_pids = {p: self._wiring.pids[p] for p in self.topology.machine_ranks if p != rank}
        self._connecting = threading.Lock()
        self.watchdog = Watchdog(rank, self.config.timeout, self.aborted_by, machine_pids, self.recorder, self.log)
        # Call numbers, algorithm choice, tracer, windows, and the one queue every operation runs through.
        self.engine = Engine(self)
        self._group = Group(self.engine.run_batch, self.engine.cancel_batch)

    # -- who is who ---------------------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's rank in the communicator, from 0 to ``size - 1``.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.rank                              # under mpiexec -n 4: 0, 1, 2 or 3
        0
        >>> comm.destroy()
        """
        return self.topology.rank

    @property
    def size(self) -> int:
        """The number of ranks.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.size                              # under mpiexec -n 4: 4
        1
        >>> comm.destroy()
        """
        return self.topology.size

    @property
    def node(self) -> int:
        """This rank's node, numbered from 0 in order of the nodes' first ranks.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.node, comm.nnodes                 # NBCOLL_RANKS_PER_NODE=2 makes 4 ranks two nodes
        (0, 1)
        >>> comm.destroy()
        """
        return self.topology.node

    @property
    def nnodes(self) -> int:
        """The number of nodes (machines, or groups of ``NBCOLL_RANKS_PER_NODE`` ranks) the ranks run on.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.nnodes
        1
        >>> comm.destroy()
        """
        return self.topology.nnodes

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks of its node (the GPU it uses when a node has several).

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.local_rank
        0
        >>> comm.destroy()
        """
        return self.topology.local_rank

    @property
    def local_size(self) -> int:
        """The number of ranks on this rank's node.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.local_size
        1
        >>> comm.destroy()
        """
        return self.topology.local_size

    def transport_to(self, peer: int) -> str:
        """``"ipc"`` or ``"mpi"``: how bytes travel to ``peer``.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> [comm.transport_to(peer) for peer in range(comm.size) if peer != comm.rank]   # under mpiexec: ['ipc', ...]
        []
        >>> comm.transport_to(comm.rank)
        Traceback (most recent call last):
            ...
        ValueError: peer: rank 0 is this rank; a rank cannot send to or receive from itself
        >>> comm.destroy()
        """
        return self.topology.transport_to(self._check_peer(peer))

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else "aborted" if self._aborted_by is not None else "ready"
        return f"Communicator(rank={self.rank}, size={self.size}, node={self.node}, {state})"

    # -- argument checks the mixins share -----------------------------------------------------------------------

    def _check_peer(self, peer: Any, arg: str = "peer") -> int:
        if not isinstance(peer, numbers.Integral) or isinstance(peer, bool):
            raise TypeError(f"{arg}: expected an int rank, got {type(peer).__name__}")
        peer = int(peer)
        if not 0 <= peer < self.size:
            raise ValueError(f"{arg}: rank {peer} is out of range for a communicator of {self.size} ranks")
        if peer == self.rank:
            raise ValueError(f"{arg}: rank {peer} is this rank; a rank cannot send to or receive from itself")
        return peer

    def _flat_buffer(self, buf: Any, arg: str) -> Any:
        buf = memory.as_device_array(buf, arg)
        memory.check_dtype(buf.dtype, f"{arg}.dtype", allow_bool=True)
        memory.require_contiguous(buf, arg)
        return buf.reshape(buf.size) if buf.ndim != 1 else buf


class SingleRankWarning(UserWarning):
    """:func:`init` found itself the only rank of a process that no MPI launcher started.

    >>> import warnings, nbcoll
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     comm = nbcoll.init()               # started as plain python: one rank, and a warning
    >>> [w.category.__name__ for w in caught]
    ['SingleRankWarning']
    >>> comm.destroy()
    """


def init(mpi_comm: Any = None, config: CommConfig | None = None) -> Communicator:
    """Collective: a communicator of the ranks of ``mpi_comm`` (default ``MPI.COMM_WORLD``).

    Settings come from the ``NBCOLL_*`` environment variables unless ``config`` is given
    (see :mod:`nbcoll.comm.config`). A script started as plain ``python script.py`` is a world of one rank:
    that works, but is rarely what was meant, so it is said with a :class:`SingleRankWarning`.

    >>> import nbcoll
    >>> from mpi4py import MPI
    >>> from nbcoll.comm import CommConfig
    >>> comm = nbcoll.init(MPI.COMM_WORLD, CommConfig(timeout=60.0))     # nbcoll.init() reads NBCOLL_* instead
    >>> comm.size, comm.config.timeout
    (1, 60.0)
    >>> comm.destroy()
    """
    comm = Communicator(MPI.COMM_WORLD if mpi_comm is None else mpi_comm, config)
    if mpi_comm is None and comm.size == 1 and not _started_by_a_launcher():
        warnings.warn(
            "nbcoll.init(): this process is the only rank: it was not started by an MPI launcher. "
            "Run it as `mpiexec -n 4 python script.py` (or with srun) for several ranks.",
            SingleRankWarning,
            stacklevel=2,
        )
    return comm


def _started_by_a_launcher() -> bool:
    from nbcoll.launch import under_mpi

    return under_mpi() or bool(os.environ.get("SLURM_STEP_ID"))
