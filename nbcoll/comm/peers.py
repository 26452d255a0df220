"""A communicator's ways to each peer: its connections, one per channel and direction, and the traffic counters.

These are the interface that operations built outside the communicator use: a collective's primitives take their
connections from :meth:`Peers.send_connection` and :meth:`Peers.recv_connection` and charge what they move to
:meth:`Peers.peer_counters`. Connections to peers on this node were built at creation (ipc); those to other nodes
are made at first use (mpi), by whichever thread asks first.

Example::

    conn = comm.send_connection(peer=1, channel=0)     # the FIFO towards rank 1
    comm.peer_counters(1).bytes_sent                   # what went to rank 1 so far
    comm.counters.bytes_sent                           # summed over the peers
"""

from __future__ import annotations

from nbcoll.comm.connection import RecvConnection, SendConnection
from nbcoll.comm.counters import FIELDS, Counters, PeerCounters


class Peers:
    """The connections and counters of :class:`~nbcoll.comm.communicator.Communicator` (a mixin).

    Example::

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.counters.bytes_sent               # on one rank there is no peer, and nothing moves
        0
        >>> comm.destroy()
    """

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

    # -- counters -----------------------------------------------------------------------------------------------

    def peer_counters(self, peer: int) -> PeerCounters:
        """The live counters of ``peer``, for operations built outside this class.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> comm.peer_counters(0).bytes_sent
        0
        >>> comm.destroy()
        """
        counters = self._counters.get(peer)
        if counters is None:  # (not setdefault: that would build a PeerCounters on every call, a hot path)
            counters = self._counters[peer] = PeerCounters()
        return counters

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
