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
"""

from __future__ import annotations

import numbers
import os
import threading
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll import memory
from nbcoll.comm.bootstrap import Wiring, bootstrap, release, rendezvous
from nbcoll.comm.collectives import Collectives
from nbcoll.comm.config import CommConfig
from nbcoll.comm.connection import RecvConnection, SendConnection
from nbcoll.comm.counters import FIELDS, Counters, PeerCounters
from nbcoll.comm.debug import FlightRecorder, Logger
from nbcoll.comm.engine import Engine
from nbcoll.comm.errors import CommAbortedError
from nbcoll.comm.group import Group
from nbcoll.comm.p2p import RecvOp, SendOp, describe_array
from nbcoll.comm.watchdog import TAG_ABORT, Watchdog, abort_message_source

NOCOLOR = -1
"""``split(color=NOCOLOR)`` leaves this rank out of every new communicator (NCCL_SPLIT_NOCOLOR)."""


class Communicator(Collectives):
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

    @property
    def closed(self) -> bool:
        """True once :meth:`destroy` has run: every operation then fails.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.closed
        False
        >>> comm.destroy()
        >>> comm.closed
        True
        """
        return self._destroyed

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else "aborted" if self._aborted_by is not None else "ready"
        return f"Communicator(rank={self.rank}, size={self.size}, node={self.node}, {state})"

    # -- checks -------------------------------------------------------------------------------------------------

    def aborted_by(self) -> int | None:
        """The rank that aborted this communicator, or ``None``.

        Polls the control page, abort messages, and the peers' refusals: a refusal of a call this rank has run
        aborts the communicator here (see :mod:`.refusal`).

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> print(comm.aborted_by())
        None
        >>> comm.abort()
        >>> comm.aborted_by()
        0
        >>> comm.destroy()
        """
        if self._aborted_by is None and not self._destroyed:
            by = self._wiring.control.aborted_by
            if by is None:
                by = abort_message_source(self._wiring.ctrl)
            if by is not None:
                self._aborted_by = by
                self.log.warn("INIT", f"communicator aborted by rank {by}")
            elif self.engine.refusals.poll() is not None:
                self.log.warn("INIT", self.engine.refusals.conflict)
                self.abort()
        return self._aborted_by

    def _check_usable(self) -> None:
        if self._destroyed:
            raise ValueError(f"rank {self.rank}: the communicator is destroyed; create a new one")
        try:
            self.watchdog.check_aborted()
        except CommAbortedError as exc:
            conflict = self.engine.refusals.conflict
            if conflict is None:
                raise
            raise CommAbortedError(f"rank {self.rank}: {conflict}") from exc

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

    # -- connections (the interface collective primitives build on) ---------------------------------------------

    def send_connection(self, peer: int, channel: int = 0) -> SendConnection:
        """The connection this rank sends to ``peer`` through on ``channel``; mpi ones are made at first use.

        Point-to-point messages use channel 0; a collective splits its buffer across the channels
        (``NBCOLL_NCHANNELS``), each channel a connection of its own with its own FIFO and counters.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> if comm.size > 1:                      # under mpiexec: the FIFO towards the next rank
        ...     connection = comm.send_connection((comm.rank + 1) % comm.size)
        >>> comm.destroy()
        """
        link = self._link(peer, channel)
        connection = self._wiring.send.get(link)
        if connection is not None:
            return connection
        with self._connecting:  # the caller's thread and the progress thread may both ask for it first
            if link not in self._wiring.send:
                from nbcoll.comm.transport.mpi import MpiSendConnection  # only for a peer on another node

                self._wiring.send[link] = MpiSendConnection(
                    link[0], self._wiring.data_channels[channel], *self._mpi_connection_settings()
                )
                self.log.info("NET", f"send connection to peer {link[0]} channel {channel} over MPI (host staging)")
        return self._wiring.send[link]

    def recv_connection(self, peer: int, channel: int = 0) -> RecvConnection:
        """The connection this rank receives from ``peer`` through on ``channel``; mpi ones are made at first use.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> if comm.size > 1:                      # under mpiexec: the FIFO from the previous rank
        ...     connection = comm.recv_connection((comm.rank - 1) % comm.size)
        >>> comm.destroy()
        """
        link = self._link(peer, channel)
        connection = self._wiring.recv.get(link)
        if connection is not None:
            return connection
        with self._connecting:
            if link not in self._wiring.recv:
                from nbcoll.comm.transport.mpi import MpiRecvConnection  # only for a peer on another node

                self._wiring.recv[link] = MpiRecvConnection(
                    link[0], self._wiring.data_channels[channel], *self._mpi_connection_settings()
                )
                self.log.info("NET", f"recv connection from peer {link[0]} channel {channel} over MPI (host staging)")
        return self._wiring.recv[link]

    def _link(self, peer: int, channel: int) -> tuple[int, int]:
        if not 0 <= channel < self.config.nchannels:
            raise ValueError(f"channel: expected 0 to {self.config.nchannels - 1} (NBCOLL_NCHANNELS), got {channel!r}")
        return self._check_peer(peer), channel

    def _mpi_connection_settings(self) -> tuple[int, int, bool]:
        return self.config.steps, self.config.chunk_bytes, self.config.mpi_cuda_aware

    def peer_counters(self, peer: int) -> PeerCounters:
        """The live counters of ``peer``, for operations built outside this class.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.peer_counters(0).bytes_sent
        0
        >>> comm.destroy()
        """
        return self._counters.setdefault(peer, PeerCounters())

    # -- registered buffers -------------------------------------------------------------------------------------

    def alloc(self, count: int, dtype: Any = np.float32) -> Any:
        """Collective: ``count`` x ``dtype`` of memory every peer on this machine maps (NCCL's registered buffers).

        A direct collective (``algo="direct"``) whose input lies in such a buffer lets the peers read it in
        place, so all-gather, broadcast, all-to-all and one-shot all-reduce copy each byte once per hop instead
        of twice; any other buffer is copied through a window or a FIFO first. Every rank calls it, in the same
        order. With a peer on another node it is plain device memory.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = comm.alloc(4, np.float32)
        >>> x[:] = 1.0
        >>> nbcoll.to_host(comm.all_gather(x, nbcoll.zeros(4 * comm.size), algo="direct"))
        array([1., 1., 1., 1.], dtype=float32)
        >>> comm.free(x)
        >>> comm.destroy()
        """
        if int(count) < 0:
            raise ValueError(f"count: expected a number of elements >= 0, got {count}")
        self._check_usable()
        return self.engine.alloc(int(count), memory.check_dtype(dtype))

    def free(self, array: Any) -> None:
        """Let go of a buffer from :meth:`alloc` on this rank, once no collective uses it any more.

        Local: every rank frees its own buffer, in any order.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = comm.alloc(8, np.int32)
        >>> comm.free(x)
        >>> comm.destroy()
        """
        self.engine.free(array)

    # -- point-to-point -----------------------------------------------------------------------------------------

    def send(self, buf: Any, peer: int) -> None:
        """Send the whole of the contiguous device array ``buf`` to ``peer``.

        ``for k in chunks: wait for a free slot at peer; copy buf's chunk k into it; publish``. Returns when
        every chunk is in the peer's FIFO (or on the wire); inside :meth:`group`, when the group ends.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = nbcoll.to_device(np.arange(4, dtype=np.float32))
        >>> if comm.size > 1 and comm.rank == 0:   # under mpiexec -n 2: rank 0 sends, rank 1 receives
        ...     comm.send(x, peer=1)
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.settle()
        data = self._flat_buffer(buf, "buf")
        peer = self._check_peer(peer)
        record = self.recorder.record("send", peer, data.size * data.dtype.itemsize, describe_array(data))
        self.log.info("P2P", f"send #{record.seq} to peer {peer}: {record.nbytes} bytes, {record.what}")
        self._group.submit(SendOp(self.send_connection(peer), data, self.peer_counters(peer), record))

    def recv(self, buf: Any, peer: int) -> None:
        """Receive a message from ``peer`` into the contiguous device array ``buf``, which it must fill exactly.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> y = nbcoll.zeros(4)
        >>> if comm.size > 1 and comm.rank == 1:   # under mpiexec -n 2: what rank 0 sent
        ...     comm.recv(y, peer=0)
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.settle()
        data = self._flat_buffer(buf, "buf")
        memory.require_writable(data, "buf")
        peer = self._check_peer(peer)
        record = self.recorder.record("recv", peer, data.size * data.dtype.itemsize, describe_array(data))
        self.log.info("P2P", f"recv #{record.seq} from peer {peer}: {record.nbytes} bytes, {record.what}")
        self._group.submit(RecvOp(self.recv_connection(peer), data, self.peer_counters(peer), record))

    def group(self) -> Group:
        """``with comm.group(): ...`` queues the sends and receives inside and runs them together at the end.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x, y = nbcoll.to_device(np.ones(4, np.float32)), nbcoll.zeros(4)
        >>> with comm.group():                     # on one rank: an empty group
        ...     for peer in range(comm.size):
        ...         if peer != comm.rank:          # an exchange with every other rank, in any order
        ...             comm.send(x, peer)
        ...             comm.recv(y, peer)
        >>> comm.destroy()
        """
        self._check_usable()
        return self._group

    def drive(self, ops: list[Any]) -> None:
        """Progress operations built on this communicator's connections until done (see :mod:`.watchdog`).

        They run in issue order with this communicator's other operations, after any still in flight.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.drive([])                         # ops from nbcoll.comm.p2p, as a collective algorithm builds them
        >>> comm.destroy()
        """
        self._check_usable()
        self.engine.run_batch(list(ops), [])

    # -- counters -----------------------------------------------------------------------------------------------

    @property
    def counters(self) -> Counters:
        """Cumulative bytes and chunks sent and received, per peer (``counters[peer]``) and in total.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> _ = comm.all_reduce(np.ones(4, np.float32))
        >>> comm.counters                          # on one rank, all_reduce moves nothing
        Counters(bytes_sent=0, bytes_received=0, chunks_sent=0, chunks_received=0, bytes_copied=0, peers=[])
        >>> comm.destroy()
        """
        return Counters(self._counters)

    def reset_counters(self) -> None:
        """Start the counters again from zero (on this rank only).

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.reset_counters()
        >>> comm.counters.bytes_sent
        0
        >>> comm.destroy()
        """
        for pc in self._counters.values():
            for name in FIELDS:
                setattr(pc, name, 0)

    # -- new communicators --------------------------------------------------------------------------------------

    def _derive(self, mpi_comm: Any) -> Communicator:
        try:
            return Communicator(mpi_comm, self.config, _node_key=self._wiring.node_key)
        finally:
            mpi_comm.Free()

    def split(self, color: int, key: int = 0) -> Communicator | None:
        """Collective: ranks with the same ``color`` form a new communicator, ordered by ``key`` then rank.

        Returns ``None`` on ranks that pass :data:`NOCOLOR`.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> halves = comm.split(color=comm.rank % 2, key=comm.rank)   # even and odd ranks apart
        >>> halves.size, halves.rank
        (1, 0)
        >>> halves.destroy(); comm.destroy()
        """
        self._check_usable()
        if not isinstance(color, numbers.Integral) or (color < 0 and color != NOCOLOR):
            raise ValueError(f"color: expected an int >= 0 or nbcoll.NOCOLOR, got {color!r}")
        if not isinstance(key, numbers.Integral):
            raise TypeError(f"key: expected an int, got {type(key).__name__}")
        mpi_color = MPI.UNDEFINED if color == NOCOLOR else int(color)
        self._rendezvous("split")
        child = self._wiring.ctrl.Split(mpi_color, int(key))
        if child == MPI.COMM_NULL:
            return None
        return self._derive(child)

    def dup(self) -> Communicator:
        """Collective: a new communicator of the same ranks, with its own connections and counters.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> other = comm.dup()                     # a library can talk on its own copy without mixing messages
        >>> other.size == comm.size, other is comm
        (True, False)
        >>> other.destroy(); comm.destroy()
        """
        self._check_usable()
        self._rendezvous("dup")
        return self._derive(self._wiring.ctrl.Dup())

    def _rendezvous(self, what: str) -> None:
        """Wait, bounded, for every rank to reach ``what``: MPI's Split and Dup block where nothing can stop them."""

        def check() -> None:
            self.watchdog.check_aborted()
            self.watchdog.check_peer_processes(what)

        try:
            rendezvous(self._wiring.ctrl, f"{what} of {self!r}", self.config.timeout, check)
        except BaseException:
            self.watchdog.failed = True  # its barrier stays pending on the MPI communicator
            raise

    def shrink(self, exclude_ranks: Iterable[int]) -> Communicator:
        """A new communicator of every rank but ``exclude_ranks``, built without them.

        Collective over the surviving ranks only: the excluded ones may be dead or stuck. It works on an
        aborted communicator, which is the usual way to continue after a failure.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> survivors = comm.shrink(exclude_ranks=[])      # after a failure: comm.shrink([dead_rank])
        >>> survivors.size
        1
        >>> survivors.destroy(); comm.destroy()
        """
        if self._destroyed:
            raise ValueError(f"rank {self.rank}: the communicator is destroyed; shrink it before destroying it")
        excluded = sorted({self._check_rank(r) for r in exclude_ranks})
        if self.rank in excluded:
            raise ValueError(f"exclude_ranks: this rank ({self.rank}) is excluded; only survivors call shrink")
        group = self._wiring.ctrl.Get_group()
        survivors = group.Excl(excluded)
        try:
            child = self._wiring.ctrl.Create_group(survivors, tag=TAG_ABORT + 1)
        finally:
            survivors.Free()
            group.Free()
        return self._derive(child)

    def _check_rank(self, r: Any) -> int:
        if not isinstance(r, numbers.Integral) or not 0 <= r < self.size:
            raise ValueError(f"exclude_ranks: {r!r} is not a rank of this communicator of {self.size} ranks")
        return int(r)

    # -- ending -------------------------------------------------------------------------------------------------

    def abort(self) -> None:
        """Make every pending and future operation of this communicator fail, on every rank, promptly.

        Sets the abort flag that ranks on this machine poll, and sends an abort message to the others.
        Never blocks.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.abort()                           # every rank's pending and next operations fail
        >>> try:
        ...     comm.barrier()
        ... except nbcoll.CommAbortedError:
        ...     print("aborted")
        aborted
        >>> comm.destroy()
        """
        if self._destroyed or self._aborted_by is not None:
            return
        self._aborted_by = self.rank
        self._wiring.control.set_aborted(self.rank)
        for peer in range(self.size):
            if peer != self.rank and not self.topology.same_machine(peer):
                empty = np.empty(0, np.uint8)
                self._abort_requests.append(self._wiring.ctrl.Isend([empty, MPI.BYTE], dest=peer, tag=TAG_ABORT))
        self.log.warn("INIT", "communicator aborted by this rank")

    def destroy(self) -> None:
        """Free the connections, the shared memory and the MPI communicators of this rank. Idempotent.

        Async operations still in flight complete first, for at most ``NBCOLL_TIMEOUT`` seconds; after that the
        communicator is aborted, and whatever has not run fails.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.destroy()
        >>> comm.destroy()                         # a second call does nothing
        >>> comm.closed
        True
        """
        if self._destroyed:
            return
        progress = self.engine.progress
        if not progress.quiesce(self.config.timeout):
            self.abort()  # releases the running operation at its next check
            progress.cancel(CommAbortedError(f"rank {self.rank}: the communicator was destroyed before it ran"))
            progress.quiesce(self.config.timeout)
        self._destroyed = True
        self.engine.close()
        for conn in [*self._wiring.send.values(), *self._wiring.recv.values()]:
            conn.close()
        self._wiring.control.close()
        # Abort messages are empty and sent eagerly: they complete on their own, so they are simply dropped.
        self._abort_requests.clear()
        if not MPI.Is_finalized():
            release(self._wiring, failed=self.watchdog.failed or self._aborted_by is not None)

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()


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
