"""nbcoll as a ``torch.distributed`` backend: ``import nbcoll.torch_backend`` registers ``"nbcoll"``.

Then PyTorch's own training (``DistributedDataParallel``, FSDP2's ``fully_shard``) runs its collectives on
nbcoll's communicators, unchanged::

    import torch, torch.distributed as dist
    import nbcoll.torch_backend

    dist.init_process_group("nbcoll")        # mpiexec -n 4 python train.py, or torchrun --nproc-per-node 4 train.py
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))

Under ``mpiexec`` the MPI world gives the ranks (importing this package fills in ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` when they are missing: :mod:`~nbcoll.torch_backend.environment`); under
``torchrun`` the communicator is bootstrapped through torch's store (:mod:`~nbcoll.torch_backend.store_comm`).
CPU tensors need ``NBCOLL_BACKEND=numpy`` to be used in place (on ``sim`` each call copies them to the simulated
device and back); CUDA tensors need ``cuda``.

The package, one concern per module::

    environment.py      env:// from the MPI world under mpiexec
    store_comm.py       the MPI calls of a communicator, through a torch Store (torchrun)
    communicators.py    the communicator of each process group (world, new_group)
    tensors.py          tensors as nbcoll arrays without a copy; torch's ReduceOp names
    work.py             torch's Work, waiting on nbcoll's asynchronous work
    process_group.py    ProcessGroupNbcoll: every collective
"""

from __future__ import annotations

import torch.distributed as dist

from nbcoll.torch_backend.communicators import create
from nbcoll.torch_backend.environment import fill_from_mpi
from nbcoll.torch_backend.process_group import ProcessGroupNbcoll
from nbcoll.torch_backend.work import NbcollWork

__all__ = ["BACKEND", "NbcollWork", "ProcessGroupNbcoll", "register"]

BACKEND = "nbcoll"
"""The name to pass to ``torch.distributed.init_process_group``."""


def register() -> None:
    """Register the ``"nbcoll"`` backend with torch (for cpu and cuda tensors); importing this package does it.

    >>> import torch.distributed as dist
    >>> import nbcoll.torch_backend
    >>> nbcoll.torch_backend.register()            # again: a no-op
    >>> "nbcoll" in dist.Backend.backend_list
    True
    """
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create, extended_api=True, devices=["cpu", "cuda"])


register()
fill_from_mpi()
