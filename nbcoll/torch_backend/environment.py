"""Under ``mpiexec``, the variables of ``env://`` taken from the MPI world, so ``init_process_group("nbcoll")`` works.

``torch.distributed.init_process_group`` without a store reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` from the environment (``torchrun`` sets them). A rank started by ``mpiexec`` has none of them, but
it has the MPI world: :func:`fill_from_mpi` sets each one that is missing from it, rank 0 choosing the address and a
free port and the others learning them by broadcast::

    RANK, WORLD_SIZE              MPI.COMM_WORLD's rank and size
    LOCAL_RANK, LOCAL_WORLD_SIZE  the rank and size among the ranks of this machine
    MASTER_ADDR, MASTER_PORT      rank 0's host name (127.0.0.1 on one machine) and a port free there

Example::

    fill_from_mpi()                               # collective over MPI.COMM_WORLD when under mpiexec
    torch.distributed.init_process_group("nbcoll")
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping

from nbcoll.launch import under_mpi

FILLED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""The variables :func:`fill_from_mpi` may set."""


def free_port() -> int:
    """A TCP port nobody listens on now (the operating system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def fill_from_mpi(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set the missing variables of ``env://`` from the MPI world; return whether this process is under MPI.

    Outside an MPI job nothing happens (``torchrun`` or a user sets them). Under one, it is collective over
    ``MPI.COMM_WORLD`` (one broadcast) unless every variable is set already.
    """
    environ = os.environ if environ is None else environ
    if not under_mpi(environ):
        return False
    if all(environ.get(name) for name in FILLED):
        return True
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    machine = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    try:
        local_rank, local_size = machine.Get_rank(), machine.Get_size()
    finally:
        machine.Free()
    # On one machine (every rank on rank 0's), the loopback address: a host name may resolve to an outside one.
    host = "127.0.0.1" if local_size == world.Get_size() else socket.gethostname()
    here = (host, free_port()) if world.Get_rank() == 0 else None
    address, port = world.bcast(here, root=0)
    found = {
        "RANK": world.Get_rank(), "WORLD_SIZE": world.Get_size(), "LOCAL_RANK": local_rank,
        "LOCAL_WORLD_SIZE": local_size, "MASTER_ADDR": address, "MASTER_PORT": port,
    }  # fmt: skip
    for name in FILLED:
        environ.setdefault(name, str(found[name]))
    return True
