"""torch.distributed's gloo backend on CPU, as a second peer for ``vs_mpi.py``: what a Python user would pick.

Optional: without torch (``pip install -e ".[peers]"``), :func:`start` says so and the benchmark runs without it.
gloo never touches the network beyond this machine: its rendezvous is a file (a ``FileStore`` named by rank 0
and passed to the others over MPI), and its connections use the loopback interface. Ranks are MPI's.

Example (on every rank, under mpiexec)::

    gloo, why_not = start(MPI.COMM_WORLD)
    if gloo is not None:
        call = gloo.call("all_reduce", send, recv)     # a function that runs one all-reduce
        call()
        gloo.close()
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np


class GlooPeer:
    """A gloo process group over the ranks of an MPI communicator; :meth:`call` builds one timed collective.

    Example::

        gloo = GlooPeer(MPI.COMM_WORLD)
        gloo.call("broadcast", send, recv)()
    """

    def __init__(self, world: Any) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.world = world
        self.store_path = world.bcast(_fresh_path() if world.rank == 0 else None, root=0)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's pairs connect over loopback only
        store = dist.FileStore(self.store_path, world.size)
        dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size)
        self.version = __import__("torch").__version__

    def call(self, collective: str, send: np.ndarray, recv: np.ndarray) -> Callable[[], Any]:
        """One collective on the NumPy buffers ``send`` and ``recv`` (shared with torch, not copied)."""
        import torch

        dist = self.dist
        src, dst = torch.from_numpy(send), torch.from_numpy(recv)
        if collective == "all_reduce":  # gloo reduces in place: the out-of-place form copies first, as MPI does

            def all_reduce() -> None:
                dst.copy_(src)
                dist.all_reduce(dst)

            return all_reduce
        if collective == "all_gather":
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            return lambda: gather(dst, src)
        if collective == "reduce_scatter":
            scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            return lambda: scatter(dst, src)
        if collective == "broadcast":
            return lambda: dist.broadcast(dst, src=0)
        if collective == "all_to_all":
            return lambda: dist.all_to_all_single(dst, src)
        raise ValueError(f"collective: gloo has no {collective!r} here; expected one of vs_mpi's COLLECTIVES")

    def close(self) -> None:
        self.dist.destroy_process_group()
        self.world.Barrier()
        if self.world.rank == 0 and os.path.exists(self.store_path):
            os.unlink(self.store_path)


def start(world: Any) -> tuple[GlooPeer | None, str]:
    """The gloo peer, or ``None`` and why not (torch is not installed). Collective: every rank must call."""
    try:
        import torch.distributed as dist
    except ImportError:
        have = False
    else:
        have = dist.is_available() and dist.is_gloo_available()
    if not world.allreduce(have, op=_land()):
        return None, 'gloo skipped: torch with gloo is not installed (pip install -e ".[peers]")'
    return GlooPeer(world), ""


def _fresh_path() -> str:
    handle, path = tempfile.mkstemp(prefix="nbcoll_gloo_store_")
    os.close(handle)
    os.unlink(path)  # FileStore creates it; an existing file could hold an earlier run's keys
    return path


def _land() -> Any:
    from mpi4py import MPI

    return MPI.LAND
