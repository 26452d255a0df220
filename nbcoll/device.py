"""Which GPU this process uses: the one its rank on the machine points to, chosen before any memory is allocated.

On a machine with several GPUs each rank takes GPU ``local_rank % device_count``, as one process per GPU
(NCCL's usual setup) wants. The choice has to come first: Numba binds a process to one GPU's context at the
first allocation or launch, and cannot switch it afterwards. So the ``cuda`` backend makes it the first time
it is used (:func:`nbcoll.backend.cuda`), from the local rank the launcher announces, and the communicator's
bootstrap confirms it with the local rank it measures (``MPI.COMM_TYPE_SHARED``). A program that uses
``numba.cuda`` directly before nbcoll allocates anything calls :func:`nbcoll.backend.select_device` first.

Example::

    device_for_local_rank(local_rank=5, device_count=4)     # 1
    local_rank_from_environment({"MPI_LOCALRANKID": "3"})   # 3 (MPICH's hydra sets it for every rank)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

LOCAL_RANK_VARIABLES = (
    "NBCOLL_LOCAL_RANK",  # set by the user: wins over the launchers' own
    "MPI_LOCALRANKID",  # MPICH (hydra)
    "OMPI_COMM_WORLD_LOCAL_RANK",  # Open MPI
    "MV2_COMM_WORLD_LOCAL_RANK",  # MVAPICH
    "SLURM_LOCALID",  # srun
    "LOCAL_RANK",  # torchrun and friends
)
"""Where launchers write a process's rank among the processes of its machine, in the order they are read."""

_selected: dict[str, int] = {}  # "device" and "local_rank" once chosen in this process


def local_rank_from_environment(environ: Mapping[str, str] | None = None) -> int | None:
    """The local rank a launcher set in the environment, or ``None`` when no known variable is set."""
    environ = os.environ if environ is None else environ
    for name in LOCAL_RANK_VARIABLES:
        text = environ.get(name, "").strip()
        if not text:
            continue
        if not text.isdigit():
            raise ValueError(f"{name}: expected a local rank (an integer >= 0), got {text!r}")
        return int(text)
    return None


def device_for_local_rank(local_rank: int, device_count: int) -> int:
    """``local_rank % device_count``: ranks of a machine spread over its GPUs, round-robin when they are more."""
    if local_rank < 0:
        raise ValueError(f"local_rank: expected >= 0, got {local_rank}")
    if device_count < 1:
        raise ValueError(f"device_count: expected at least one visible GPU, got {device_count}")
    return local_rank % device_count


def select(cuda: Any, local_rank: int | None = None) -> int:
    """Make this process's GPU current in ``cuda`` (``numba.cuda``), once; return its number.

    ``local_rank`` defaults to the launcher's (:func:`local_rank_from_environment`), else 0. A second call
    selects nothing: it returns the device chosen first.
    """
    if "device" in _selected:
        return _selected["device"]
    if local_rank is None:
        local_rank = local_rank_from_environment()
    local_rank = 0 if local_rank is None else local_rank
    device = device_for_local_rank(local_rank, len(cuda.gpus))
    cuda.select_device(device)
    _selected.update(device=device, local_rank=local_rank)
    return device


def selected() -> int | None:
    """The GPU this process selected, or ``None`` before the ``cuda`` backend was first used."""
    return _selected.get("device")


def mismatch(local_rank: int, device_count: int) -> str:
    """Empty when the selected GPU is the one ``local_rank`` points to; otherwise a sentence saying why not."""
    if "device" not in _selected:
        return ""
    wanted = device_for_local_rank(local_rank, device_count)
    if wanted == _selected["device"]:
        return ""
    return (
        f"this process uses GPU {_selected['device']} (local rank {_selected['local_rank']} when the GPU was "
        f"chosen) but its local rank on this machine is {local_rank}, which means GPU {wanted}; set "
        f"NBCOLL_LOCAL_RANK or launch with mpiexec, which says each process's local rank"
    )
