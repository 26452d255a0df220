"""``DeviceMesh``: the ranks laid out on a grid of parallel dimensions, one communicator along each.

Every rank has a coordinate on each dimension; the rank number is the coordinate read as a mixed-radix number,
the last dimension varying fastest::

    rank = ((pp_i * dp + dp_i) * ep + ep_i) * tp + tp_i

Tensor parallel is the innermost dimension because its collectives run on every layer, so its ranks are the
nearest (on a real machine, the GPUs of one node). The communicator of a dimension holds the ranks that share
every other coordinate: ``split(color = the other coordinates, key = this coordinate)``.

Example::

    comm = nbcoll.init()                           # 4 ranks
    mesh = DeviceMesh(comm, dp=2, tp=2)
    mesh["tp"].all_reduce(x, y)                    # between the two tensor-parallel ranks of this data-parallel row
    mesh.coords                                    # {"pp": 0, "dp": 1, "ep": 0, "tp": 0} on rank 2
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

DIMS = ("pp", "dp", "ep", "tp")
"""The mesh dimensions, outermost first."""


def _size(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int (ranks along the {name} dimension), got {value!r}")
    return value


class DeviceMesh:
    """The communicators of a ``pp x dp x ep x tp`` grid of ranks, built collectively with ``comm.split``.

    Example::

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()                       # under mpiexec -n 4: DeviceMesh(comm, dp=2, pp=2)
        >>> mesh = DeviceMesh(comm, dp=1, pp=1)
        >>> stage_comm = mesh["pp"]                    # the pipeline this rank belongs to
        >>> mesh.size("dp"), mesh.coord("dp"), stage_comm.size
        (1, 0, 1)
        >>> mesh.destroy()
        >>> comm.destroy()

    Every rank of ``comm`` must build the mesh with the same sizes (``split`` is collective).
    """

    def __init__(self, comm: Communicator, dp: int = 1, tp: int = 1, pp: int = 1, ep: int = 1) -> None:
        self.shape = {"pp": _size(pp, "pp"), "dp": _size(dp, "dp"), "ep": _size(ep, "ep"), "tp": _size(tp, "tp")}
        total = pp * dp * ep * tp
        if total != comm.size:
            raise ValueError(
                f"DeviceMesh: dp={dp} x tp={tp} x pp={pp} x ep={ep} = {total} ranks, but the communicator has "
                f"{comm.size}; the sizes must multiply to the world size"
            )
        self.world = comm
        self.coords = self.coords_of(comm.rank)
        self._comms: dict[str, Communicator] = {}
        for dim in DIMS:  # same order on every rank: split is collective
            color = 0  # the other coordinates as one mixed-radix number
            for other in DIMS:
                if other != dim:
                    color = color * self.shape[other] + self.coords[other]
            self._comms[dim] = comm.split(color, key=self.coords[dim])

    def coords_of(self, rank: int) -> dict[str, int]:
        """The coordinate of ``rank`` on every dimension (the mixed-radix digits of the rank).

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm)
        >>> mesh.coords_of(0)
        {'pp': 0, 'dp': 0, 'ep': 0, 'tp': 0}
        >>> mesh.destroy(); comm.destroy()
        """
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or not 0 <= rank < self.world.size:
            raise ValueError(f"rank: expected an int in [0, {self.world.size}) (the ranks of this mesh), got {rank!r}")
        rank = int(rank)
        coords = {}
        for dim in reversed(DIMS):
            rank, coords[dim] = divmod(rank, self.shape[dim])
        return {dim: coords[dim] for dim in DIMS}

    def rank_of(self, **coords: int) -> int:
        """The rank at ``coords``: ``mesh.rank_of(dp=1, tp=0)``, one coordinate per dimension of more than one rank.

        A dimension of size 1 may be left out (its only coordinate is 0); any other coordinate must be given, and
        be on the mesh: a ``ValueError`` names the one that is not.

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm)
        >>> mesh.rank_of(dp=0, tp=0)
        0
        >>> mesh.destroy(); comm.destroy()
        """
        for dim, at in coords.items():  # what was given first, then what is missing
            if dim not in self.shape:
                raise ValueError(f"{dim}: not a mesh dimension; expected some of {', '.join(DIMS)}")
            size = self.shape[dim]
            if isinstance(at, bool) or not isinstance(at, numbers.Integral) or not 0 <= at < size:
                raise ValueError(
                    f"{dim}: expected a coordinate in [0, {size}) (the {dim} dimension's ranks), got {at!r}"
                )
        missing = [dim for dim in DIMS if dim not in coords and self.shape[dim] > 1]
        if missing:
            dim = missing[0]
            raise ValueError(
                f"{dim}: missing; expected a coordinate in [0, {self.shape[dim]}) (the {dim} dimension's ranks)"
            )
        rank = 0
        for dim in DIMS:
            rank = rank * self.shape[dim] + int(coords.get(dim, 0))
        return rank

    def __getitem__(self, dim: str) -> Communicator:
        """The communicator of the ranks that differ from this one only along ``dim``."""
        if dim not in self._comms:
            raise KeyError(f"dim: expected one of {', '.join(DIMS)}, got {dim!r}")
        return self._comms[dim]

    def size(self, dim: str) -> int:
        """The number of ranks along dimension ``dim`` (``"dp"``, ``"tp"``, ``"pp"`` or ``"ep"``).

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm, tp=comm.size)
        >>> mesh.size("tp") == comm.size, mesh.size("pp")
        (True, 1)
        >>> mesh.destroy(); comm.destroy()
        """
        return self[dim].size

    def coord(self, dim: str) -> int:
        """This rank's index along dimension ``dim``.

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm)
        >>> mesh.coord("dp") == comm.rank
        True
        >>> mesh.destroy(); comm.destroy()
        """
        return self[dim].rank

    def destroy(self) -> None:
        """Free the communicators the mesh built (not the one it was given).

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm)
        >>> mesh.destroy()
        >>> comm.closed                                # the given communicator stays open
        False
        >>> comm.destroy()
        """
        for sub in self._comms.values():
            sub.destroy()

    def __repr__(self) -> str:
        sizes = ", ".join(f"{d}={self.shape[d]}" for d in DIMS)
        return f"DeviceMesh({sizes}; rank {self.world.rank} at {self.coords})"


__all__ = ["DIMS", "DeviceMesh"]
