"""Building a communicator's wiring over MPI, as ``ncclCommInitRank`` does once the unique id is shared.

Every step is collective over the MPI communicator given, and over nothing else (so that :meth:`shrink` can
run it among the survivors only):

0. wait, polling, until every rank has arrived (:func:`rendezvous`): the MPI calls below block inside MPI, where
   ``NBCOLL_TIMEOUT`` could not end the wait for a rank that never comes;
1. duplicate the MPI communicator: ``data`` carries chunks (one duplicate per channel, so that the chunks of
   two channels between the same ranks never match each other's receives), ``ctrl`` carries abort messages and
   the collective calls of split and shrink, so nbcoll traffic never matches the user's own MPI messages;
2. check that every rank runs with the same FIFO settings, protocol and backend (:data:`SAME_ON_EVERY_RANK`),
   and hand rank 0's tuner calibration to every rank, so that all of them choose the same algorithms;
3. find the machines (``Split_type(COMM_TYPE_SHARED)``), the nodes (pretend ones with
   ``NBCOLL_RANKS_PER_NODE``) and the transport of each pair (:class:`~nbcoll.comm.topology.Topology`); on
   ``cuda``, each rank uses GPU ``local rank % device count`` (:mod:`nbcoll.device`);
4. map one control page per machine (created by the machine's first rank, attached by the others, unlinked
   as soon as all have it);
5. for every ipc pair and every channel, the receiver allocates the FIFO, the handles are exchanged, the
   sender opens the receiver's FIFO, and the receiver unlinks it when everybody has it mapped.

After step 5 no ``/dev/shm`` name of this communicator is left: the memory lives exactly as long as the
mappings, whatever happens to the processes.

Example::

    wiring = bootstrap(MPI.COMM_WORLD, CommConfig.from_env())
    wiring.topology.describe()
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll import backend, device
from nbcoll.comm import tuner
from nbcoll.comm.config import CommConfig
from nbcoll.comm.connection import RecvConnection, SendConnection
from nbcoll.comm.control import ControlPage
from nbcoll.comm.debug import Logger
from nbcoll.comm.errors import CommTimeoutError
from nbcoll.comm.topology import Topology
from nbcoll.comm.transport.ipc import IpcRecvConnection, IpcSendConnection
from nbcoll.ipc_memory import IpcBuffer, share


@dataclass
class Wiring:
    """What bootstrap builds: MPI communicators, topology, the control page and the ipc connections."""

    data: MPI.Comm
    ctrl: MPI.Comm
    topology: Topology
    node_key: Any
    pids: list[int]
    control: ControlPage
    machine_index: dict[int, int]
    link_models: dict[str, dict[str, tuner.LinkModel]] = field(default_factory=dict)
    """backend -> transport -> rank 0's calibration, the same on every rank (see :mod:`nbcoll.comm.tuner`)."""
    uid: int = 0
    """A number drawn by rank 0 for this communicator alone: its control messages carry it (see :func:`release`)."""
    data_channels: list[MPI.Comm] = field(default_factory=list)
    """The MPI communicator of each channel's chunks; the first is ``data``."""
    send: dict[tuple[int, int], SendConnection] = field(default_factory=dict)
    """(peer, channel) -> the connection this rank sends to the peer through, on that channel."""
    recv: dict[tuple[int, int], RecvConnection] = field(default_factory=dict)


_PENDING: list[MPI.Request] = []
"""Barriers a rank gave up on: MPI needs them kept until the others arrive, which may be never."""


def rendezvous(comm: MPI.Comm, what: str, timeout: float, check: Callable[[], None] | None = None) -> None:
    """Return once every rank of ``comm`` has called this; raise ``CommTimeoutError`` after ``timeout`` seconds.

    A non-blocking barrier, polled with short sleeps: signal handlers run, and ``check()`` (an abort, a dead
    peer) may raise. Once it returns, the blocking MPI calls that follow find every rank there.
    """
    request = comm.Ibarrier()
    start = time.monotonic()
    while not request.Test():
        if check is not None:
            try:
                check()
            except BaseException:
                _PENDING.append(request)
                raise
        if time.monotonic() - start > timeout:
            _PENDING.append(request)
            raise CommTimeoutError(
                f"rank {comm.Get_rank()}: {what} waited {timeout:g} s (NBCOLL_TIMEOUT) for the other "
                f"{comm.Get_size() - 1} ranks to call it too; at least one never did"
            )
        time.sleep(0.001)


_KEPT: list[MPI.Comm] = []
"""MPI communicators of failed communicators, never freed (see :func:`release`)."""


def release(wiring: Wiring, failed: bool) -> None:
    """Free the MPI communicators of a communicator; after a failure, drain them and keep them instead.

    MPI hands a freed communicator's context to the next communicator made, and a message still on its way to
    the old one (a chunk or a control message a peer sent before it gave up) would then match a receive of the
    new one. So what has arrived is received and dropped, and after a failure, when more may still come, the
    communicators are kept, unused, for as long as the process lives.
    """
    for comm in (*(wiring.data_channels or [wiring.data]), wiring.ctrl):
        status = MPI.Status()
        while (message := comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)) is not None:
            message.Recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE])
        if failed:
            _KEPT.append(comm)
        else:
            comm.Free()


SAME_ON_EVERY_RANK = (
    "NBCOLL_BUFFSIZE", "NBCOLL_STEPS", "NBCOLL_NCHANNELS", "NBCOLL_TRANSPORT", "NBCOLL_LL_BYTES", "NBCOLL_CMA_BYTES",
    "NBCOLL_PROTO", "backend",
)  # fmt: skip
"""The settings whose values :func:`bootstrap` compares across ranks: with two values the ranks would choose
different FIFOs, transports or protocols for one call and wait for each other until ``NBCOLL_TIMEOUT``."""


def same_settings(config: CommConfig) -> tuple[Any, ...]:
    """This rank's value of each setting of :data:`SAME_ON_EVERY_RANK`, in its order (unset ``NBCOLL_PROTO``
    is ``"host"``, which is what it runs).

    >>> same_settings(CommConfig(steps=4, buffsize=256))[1], same_settings(CommConfig())[-2]
    (4, 'host')
    """
    return (config.buffsize, config.steps, config.nchannels, config.transport, config.ll_bytes, config.cma_bytes,
            config.proto or "host", backend.get_backend())  # fmt: skip


def _agree(comm: MPI.Comm, names: tuple[str, ...], mine: tuple[Any, ...]) -> None:
    """Raise ``ValueError`` on every rank, naming the settings that differ and each rank's values of them."""
    everyone = comm.allgather(mine)
    differ = [i for i, name in enumerate(names) if any(values[i] != mine[i] for values in everyone)]
    if differ:
        described = "; ".join(f"rank {r}: " + ", ".join(str(values[i]) for i in differ)
                              for r, values in enumerate(everyone))  # fmt: skip
        what = ", ".join(names[i] for i in differ)
        raise ValueError(f"{what}: every rank must use the same settings, got {described}")


def shared_memory_of(comm: MPI.Comm) -> type:
    """What the ranks of ``comm`` share memory through: :class:`~nbcoll.ipc_memory.IpcBuffer` between processes,
    or plain arrays when the ranks are threads of one process (:mod:`nbcoll.comm.loopback`)."""
    return getattr(comm, "buffer_kind", IpcBuffer)


def _map_control_page(machine: MPI.Comm, config: CommConfig) -> ControlPage:
    words = ControlPage.words_needed(machine.Get_size(), config.steps, config.nchannels)
    page = share(machine, words, np.int64, tag="ctl", host=True, kind=shared_memory_of(machine))
    page.array[:] = 0
    machine.Barrier()  # zeroed before anyone reads a counter
    return ControlPage(page, machine.Get_size(), config.steps, config.nchannels)


def _choose_gpu(local_rank: int, log: Logger, world_order: bool) -> None:
    """On ``cuda``: use GPU ``local_rank % device count``, unless this process already chose one.

    ``world_order``: the ranks are those of ``MPI.COMM_WORLD`` in its order, so ``local_rank`` is the process's
    rank on its machine, and a GPU chosen before that does not match it gets a warning. (In a split-off
    communicator the local rank is another number, and the GPU chosen first stays.)
    """
    if backend.get_backend() != "cuda":
        return
    chosen = backend.select_device(local_rank)
    problem = device.mismatch(local_rank, len(backend.cuda().gpus)) if world_order else ""
    if problem:
        warnings.warn(f"nbcoll: {problem}", RuntimeWarning, stacklevel=3)
    log.info("INIT", f"local rank {local_rank} uses GPU {chosen}")


def bootstrap(parent: MPI.Comm, config: CommConfig, log: Logger, node_key: Any = None) -> Wiring:
    """Collective over ``parent``: build the wiring of a new communicator of the same ranks."""
    rendezvous(parent, "creating a communicator", config.timeout)
    data, ctrl = parent.Dup(), parent.Dup()
    rank = data.Get_rank()
    _agree(data, SAME_ON_EVERY_RANK, same_settings(config))
    data_channels = [data] + [parent.Dup() for _ in range(config.nchannels - 1)]  # as many on every rank: agreed
    mine = (int.from_bytes(os.urandom(8), "little") >> 1, {backend.get_backend(): tuner.load_models(config)})
    uid, link_models = data.bcast(mine if rank == 0 else None, root=0)

    machine = data.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    try:
        world_order = parent.Compare(MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
        _choose_gpu(machine.Get_rank(), log, world_order)  # before the FIFOs: an allocation binds the GPU
        machine_key = machine.bcast(MPI.COMM_WORLD.Get_rank(), root=0)
        if node_key is None:
            k = config.ranks_per_node
            node_key = (machine_key, machine.Get_rank() // k if k else 0)
        everyone = data.allgather((node_key, machine_key, os.getpid()))
        topology = Topology(rank, [e[0] for e in everyone], [e[1] for e in everyone], config.transport)
        machine_ranks = machine.allgather(rank)
        machine_index = {r: i for i, r in enumerate(machine_ranks)}
        control = _map_control_page(machine, config)
        pids = [e[2] for e in everyone]
        wiring = Wiring(data, ctrl, topology, node_key, pids, control, machine_index, link_models, uid, data_channels)
        _connect_ipc(wiring, machine, config, log)
    finally:
        machine.Free()
    log.info("INIT", f"communicator ready: {topology.describe()}")
    return wiring


def _connect_ipc(wiring: Wiring, machine: MPI.Comm, config: CommConfig, log: Logger) -> None:
    topology, rank = wiring.topology, wiring.topology.rank
    ipc_peers = [p for p in topology.machine_ranks if p != rank and topology.transport_to(p) == "ipc"]
    fifo_bytes = config.steps * config.chunk_bytes
    links = [(p, c) for p in ipc_peers for c in range(config.nchannels)]
    # Each rank owns the FIFOs it receives into, one per ipc peer and channel.
    memory = shared_memory_of(machine)
    incoming = {(p, c): memory.create((fifo_bytes,), np.uint8, tag=f"f{p}to{rank}c{c}") for p, c in links}
    handles = machine.allgather({link: fifo.handle for link, fifo in incoming.items()})
    outgoing = {(p, c): memory.open(handles[wiring.machine_index[p]][(rank, c)]) for p, c in links}
    machine.Barrier()  # every FIFO is mapped by its sender: the names can go
    for fifo in incoming.values():
        fifo.unlink()
    me = wiring.machine_index[rank]
    for p, c in links:
        peer = wiring.machine_index[p]
        wiring.send[(p, c)] = IpcSendConnection(
            p, outgoing[(p, c)], wiring.control.pair(me, peer, c), config.steps, config.chunk_bytes
        )
        wiring.recv[(p, c)] = IpcRecvConnection(
            p, incoming[(p, c)], wiring.control.pair(peer, me, c), config.steps, config.chunk_bytes
        )
    for p in ipc_peers:
        log.info(
            "IPC",
            f"connected to peer {p}: {config.nchannels} channel(s), each a FIFO of {config.steps} x "
            f"{config.chunk_bytes} bytes each way",
        )
