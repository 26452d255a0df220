"""The communicator behind each process group: the world's from MPI or from torch's store, a group's from the world's.

torch calls the backend's creator once for the default group and once for each ``new_group``, on the group's
ranks only::

    default group, under mpiexec   Communicator(MPI.COMM_WORLD), reordered by torch's rank if the two differ
    default group, under torchrun  every process is an MPI singleton: Communicator(StoreComm(store, ...)), its
                                   wiring and control messages through the store torch gives (one machine only)
    new_group(ranks)               world.shrink(the other ranks): a communicator of the group's ranks, built
                                   by them alone, as torch's non-members never call the creator

Example::

    dist.init_process_group("nbcoll")        # create(...) with the default group's options
    evens = dist.new_group([0, 2])           # create(...) again on ranks 0 and 2: world.shrink([1, 3])
"""

from __future__ import annotations

import socket
from typing import Any

from nbcoll.comm.communicator import Communicator
from nbcoll.comm.config import CommConfig
from nbcoll.torch_backend.process_group import ProcessGroupNbcoll
from nbcoll.torch_backend.store_comm import StoreComm

_WORLD: list[Communicator] = []
"""The communicator of this process's default group, once created (the last one: a default group may be re-made)."""


def world_communicator(store: Any, rank: int, size: int, config: CommConfig) -> Communicator:
    """Collective over the ``size`` ranks: the communicator of torch's default group, rank ``rank`` of it."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if world.Get_size() == size:
        mpi = world if world.Get_rank() == rank else world.Split(0, rank)  # same on every rank: sizes agree
        return Communicator(mpi, config)
    if world.Get_size() != 1:
        raise RuntimeError(
            f"nbcoll backend: the MPI world has {world.Get_size()} ranks but torch's world_size is {size}; start "
            f"every rank with one launcher: mpiexec -n {size} (or torchrun, without mpiexec)"
        )
    comm = StoreComm(store, rank, size, config.timeout, context="nbcoll-world")
    hosts = comm.allgather(socket.gethostname())
    if len(set(hosts)) > 1:
        raise RuntimeError(
            f"nbcoll backend: without an MPI world (as under torchrun) every rank must run on one machine, got "
            f"{len(set(hosts))} machines ({', '.join(sorted(set(hosts)))}); across machines, start the ranks "
            "with mpiexec"
        )
    return Communicator(comm, config)


def create(options: Any, backend_options: Any = None) -> ProcessGroupNbcoll:
    """torch's creator of an ``"nbcoll"`` process group (the extended form: it is told the group's global ranks)."""
    rank, size, ranks = options.group_rank, options.group_size, list(options.global_ranks_in_group)
    config = CommConfig.from_env()
    if not ranks or not _WORLD or _WORLD[-1].closed:  # the default group: init_process_group
        _WORLD[:] = [world_communicator(options.store, rank, size, config)]
        return ProcessGroupNbcoll(_WORLD[-1], rank, size)
    world = _WORLD[-1]
    members = set(ranks)
    comm = world.shrink([r for r in range(world.size) if r not in members])
    return ProcessGroupNbcoll(comm, rank, size)
