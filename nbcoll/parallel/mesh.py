"""``DeviceMesh``: the ranks laid out on a named grid, one communicator along each dimension (PyTorch's names).

The ranks fill the grid in row-major order, the last dimension varying fastest, as ``torch.arange(n).view(shape)``
does::

    DeviceMesh(comm, (2, 2), mesh_dim_names=("dp", "tp"))     mesh.mesh = [[0, 1],
                                                                          [2, 3]]   rank = dp_i * 2 + tp_i

Put tensor parallel last: its collectives run on every layer, so its ranks should be the nearest (on a real
machine, the GPUs of one node). ``mesh["tp"]`` is the one-dimensional sub-mesh of the ranks that share every other
coordinate with this one, and ``mesh["tp"].get_group()`` its communicator: ``split(color = the other coordinates,
key = this coordinate)``, made for every dimension when the mesh is built.

Example::

    comm = nbcoll.init()                                        # 4 ranks
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), comm=comm)
    mesh["tp"].get_group().all_reduce(x, y)                     # between this data-parallel row's two ranks
    mesh.coords                                                 # {"dp": 1, "tp": 0} on rank 2
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

DIMS = ("pp", "dp", "ep", "tp")
"""The dimensions of the keyword spelling ``DeviceMesh(comm, dp=, tp=, pp=, ep=)``, outermost first."""


def _size(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected a positive int (ranks along the {name} dimension), got {value!r}")
    return int(value)


def _names(mesh_dim_names: Sequence[str] | None, ndim: int) -> tuple[str, ...]:
    if mesh_dim_names is None:
        return tuple(f"dim{i}" for i in range(ndim))
    names = tuple(mesh_dim_names)
    if len(names) != ndim or not all(isinstance(n, str) and n for n in names) or len(set(names)) != ndim:
        raise ValueError(f"mesh_dim_names: expected {ndim} distinct names (one per dimension), got {mesh_dim_names!r}")
    return names


class DeviceMesh:
    """The communicators of an n-dimensional grid of ranks, built collectively with ``comm.split``.

    Example::

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()                       # under mpiexec -n 4: DeviceMesh(comm, (2, 2), ...)
        >>> mesh = DeviceMesh(comm, (1, 1), mesh_dim_names=("dp", "tp"))
        >>> tp = mesh["tp"]                            # the sub-mesh of this rank's tensor-parallel group
        >>> tp.size(), tp.get_local_rank(), tp.get_group().size, mesh.shape
        (1, 0, 1, (1, 1))
        >>> mesh.destroy()
        >>> comm.destroy()

    Every rank of ``comm`` must build the mesh with the same shape (``split`` is collective). The keyword
    spelling ``DeviceMesh(comm, dp=2, tp=2)`` (dimensions ``pp, dp, ep, tp``, outermost first) still works and
    warns: it is ``DeviceMesh(comm, (pp, dp, ep, tp), mesh_dim_names=DIMS)``.
    """

    def __init__(
        self,
        comm: Communicator,
        mesh_shape: Sequence[int] | None = None,
        mesh_dim_names: Sequence[str] | None = None,
        *,
        dp: int | None = None,
        tp: int | None = None,
        pp: int | None = None,
        ep: int | None = None,
    ) -> None:
        sizes = {"pp": pp, "dp": dp, "ep": ep, "tp": tp}
        if any(v is not None for v in sizes.values()):
            if mesh_shape is not None:
                raise ValueError("mesh_shape: give the shape or the keyword sizes (dp=, tp=, ...), not both")
            warnings.warn(
                "DeviceMesh(comm, dp=, tp=, pp=, ep=) is deprecated: use DeviceMesh(comm, (pp, dp, ep, tp), "
                "mesh_dim_names=(...)) or init_device_mesh, whose mesh['tp'] is a sub-mesh with get_group()",
                DeprecationWarning,
                stacklevel=2,
            )
            mesh_shape, mesh_dim_names = tuple(1 if v is None else v for v in sizes.values()), DIMS
        elif mesh_shape is None:
            mesh_shape, mesh_dim_names = (1, 1, 1, 1), DIMS  # DeviceMesh(comm): one rank, every dimension 1
        if isinstance(mesh_shape, numbers.Integral):
            mesh_shape = (mesh_shape,)
        self.mesh_dim_names = _names(mesh_dim_names, len(tuple(mesh_shape)))
        self.shape = tuple(_size(s, name) for s, name in zip(mesh_shape, self.mesh_dim_names, strict=True))
        if not self.shape:
            raise ValueError("mesh_shape: expected at least one dimension, got ()")
        total = int(np.prod(self.shape))
        if total != comm.size:
            spelled = " x ".join(f"{n}={s}" for n, s in zip(self.mesh_dim_names, self.shape, strict=True))
            raise ValueError(
                f"mesh_shape: {spelled} = {total} ranks, but the communicator has {comm.size}; the sizes must "
                "multiply to the world size"
            )
        self.world = comm
        self.mesh = np.arange(total).reshape(self.shape)
        self.coords = self.coords_of(comm.rank)
        self._owned: list[Communicator] = []
        self._subs: dict[tuple[str, ...], DeviceMesh] = {}
        if len(self.shape) == 1:
            self._subs[self.mesh_dim_names] = self  # its only sub-mesh is itself
        for dim in self.mesh_dim_names if len(self.shape) > 1 else ():  # same order on every rank: collective
            self._subs[(dim,)] = self._split((dim,))

    @classmethod
    def _of(cls, comm: Communicator, names: tuple[str, ...], shape: tuple[int, ...], ranks: np.ndarray) -> DeviceMesh:
        """The sub-mesh over ``comm`` whose global ranks are ``ranks`` (built without any collective)."""
        sub = cls.__new__(cls)
        sub.mesh_dim_names, sub.shape, sub.world, sub.mesh = names, shape, comm, ranks
        sub.coords = sub.coords_of(comm.rank)
        sub._owned, sub._subs = [], {}
        if len(names) == 1:
            sub._subs[names] = sub
        return sub

    def _split(self, dims: tuple[str, ...]) -> DeviceMesh:
        """Collective: the sub-mesh of the ranks that share this rank's coordinates on every dimension not in
        ``dims``."""
        keep = [self.mesh_dim_names.index(d) for d in dims]
        color = key = 0
        for i, name in enumerate(self.mesh_dim_names):
            if i in keep:
                continue
            color = color * self.shape[i] + self.coords[name]
        for i in keep:
            key = key * self.shape[i] + self.coords[self.mesh_dim_names[i]]
        comm = self.world.split(color, key=key)
        self._owned.append(comm)
        index = tuple(slice(None) if i in keep else self.coords[n] for i, n in enumerate(self.mesh_dim_names))
        ranks = self.mesh[index]
        return DeviceMesh._of(comm, dims, tuple(self.shape[i] for i in keep), ranks)

    def __getitem__(self, dims: str | tuple[str, ...]) -> DeviceMesh:
        """The sub-mesh along ``dims`` (one name, or several in mesh order; several build a communicator:
        collective, so every rank must ask in the same order)."""
        key = (dims,) if isinstance(dims, str) else tuple(dims)
        unknown = [d for d in key if d not in self.mesh_dim_names]
        order = [self.mesh_dim_names.index(d) for d in key if d in self.mesh_dim_names]
        if unknown or not key or order != sorted(set(order)) or len(order) != len(key):
            raise KeyError(f"dims: expected names of {', '.join(self.mesh_dim_names)} in that order, got {dims!r}")
        if key not in self._subs:
            self._subs[key] = self._split(key)
        return self._subs[key]

    def _dim(self, mesh_dim: str | int | None) -> str:
        if mesh_dim is None:
            if len(self.shape) != 1:
                raise ValueError(f"mesh_dim: this mesh has {len(self.shape)} dimensions; name one")
            return self.mesh_dim_names[0]
        if isinstance(mesh_dim, numbers.Integral) and not isinstance(mesh_dim, bool):
            if not 0 <= mesh_dim < len(self.shape):
                raise ValueError(f"mesh_dim: expected an index in [0, {len(self.shape)}), got {mesh_dim}")
            return self.mesh_dim_names[int(mesh_dim)]
        if mesh_dim not in self.mesh_dim_names:
            raise ValueError(f"mesh_dim: expected one of {', '.join(self.mesh_dim_names)}, got {mesh_dim!r}")
        return mesh_dim

    def get_group(self, mesh_dim: str | int | None = None) -> Communicator:
        """The communicator along ``mesh_dim`` (a name or an index; may be left out on a 1-D mesh).

        >>> import nbcoll
        >>> from nbcoll.parallel import init_device_mesh
        >>> mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
        >>> mesh.get_group().size, mesh["dp"].get_group() is mesh.get_group("dp")
        (1, True)
        >>> mesh.destroy()
        """
        dim = self._dim(mesh_dim)
        return self.world if len(self.shape) == 1 else self[dim].world

    def size(self, mesh_dim: str | int | None = None) -> int:
        """The number of ranks along ``mesh_dim``, or in the whole mesh when it is left out.

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm, (1, comm.size), mesh_dim_names=("pp", "tp"))
        >>> mesh.size("tp") == mesh.size() == comm.size, mesh.size("pp")
        (True, 1)
        >>> mesh.destroy(); comm.destroy()
        """
        if mesh_dim is None:
            return int(np.prod(self.shape))
        return self.shape[self.mesh_dim_names.index(self._dim(mesh_dim))]

    @property
    def ndim(self) -> int:
        """The number of dimensions.

        >>> from nbcoll.parallel import init_device_mesh
        >>> mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
        >>> mesh.ndim, mesh["tp"].ndim
        (2, 1)
        >>> mesh.destroy()
        """
        return len(self.shape)

    def get_local_rank(self, mesh_dim: str | int | None = None) -> int:
        """This rank's coordinate along ``mesh_dim``.

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm, (comm.size,), mesh_dim_names=("dp",))
        >>> mesh.get_local_rank("dp") == comm.rank
        True
        >>> mesh.destroy(); comm.destroy()
        """
        return self.coords[self._dim(mesh_dim)]

    coord = get_local_rank  # the earlier spelling

    def get_rank(self) -> int:
        """This process's rank in the mesh's world (its number in :attr:`mesh`).

        >>> from nbcoll.parallel import init_device_mesh
        >>> mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
        >>> mesh.get_rank()
        0
        >>> mesh.destroy()
        """
        return int(self.mesh.reshape(-1)[self.world.rank])

    def get_coordinate(self) -> list[int]:
        """This rank's coordinate on every dimension, in order.

        >>> from nbcoll.parallel import init_device_mesh
        >>> mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
        >>> mesh.get_coordinate()
        [0, 0]
        >>> mesh.destroy()
        """
        return [self.coords[d] for d in self.mesh_dim_names]

    def coords_of(self, rank: int) -> dict[str, int]:
        """The coordinate on every dimension of the ``rank``-th rank of this mesh (its mixed-radix digits).

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm, (1, 1), mesh_dim_names=("dp", "tp"))
        >>> mesh.coords_of(0)
        {'dp': 0, 'tp': 0}
        >>> mesh.destroy(); comm.destroy()
        """
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or not 0 <= rank < self.world.size:
            raise ValueError(f"rank: expected an int in [0, {self.world.size}) (the ranks of this mesh), got {rank!r}")
        rank, coords = int(rank), {}
        for dim, size in reversed(list(zip(self.mesh_dim_names, self.shape, strict=True))):
            rank, coords[dim] = divmod(rank, size)
        return {dim: coords[dim] for dim in self.mesh_dim_names}

    def rank_of(self, **coords: int) -> int:
        """The rank at ``coords``: ``mesh.rank_of(dp=1, tp=0)``, one coordinate per dimension of more than one rank.

        A dimension of size 1 may be left out (its only coordinate is 0); any other coordinate must be given, and
        be on the mesh: a ``ValueError`` names the one that is not.

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm, (1, 1), mesh_dim_names=("dp", "tp"))
        >>> mesh.rank_of(dp=0, tp=0)
        0
        >>> mesh.destroy(); comm.destroy()
        """
        sizes = dict(zip(self.mesh_dim_names, self.shape, strict=True))
        for dim, at in coords.items():  # what was given first, then what is missing
            if dim not in sizes:
                raise ValueError(f"{dim}: not a mesh dimension; expected some of {', '.join(self.mesh_dim_names)}")
            if isinstance(at, bool) or not isinstance(at, numbers.Integral) or not 0 <= at < sizes[dim]:
                raise ValueError(
                    f"{dim}: expected a coordinate in [0, {sizes[dim]}) (the {dim} dimension's ranks), got {at!r}"
                )
        missing = [dim for dim in self.mesh_dim_names if dim not in coords and sizes[dim] > 1]
        if missing:
            dim = missing[0]
            expected = f"expected a coordinate in [0, {sizes[dim]}) (the {dim} dimension's ranks)"
            raise ValueError(f"{dim}: missing; {expected}")
        rank = 0
        for dim in self.mesh_dim_names:
            rank = rank * sizes[dim] + int(coords.get(dim, 0))
        return rank

    def __getattr__(self, name: str) -> Any:
        # The earlier mesh["tp"] was the communicator itself: forward its methods, with a warning, for one release.
        if name.startswith("_") or len(self.__dict__.get("shape", ())) != 1 or "world" not in self.__dict__:
            raise AttributeError(name)
        target = getattr(self.__dict__["world"], name)
        warnings.warn(
            f"mesh[dim].{name} is deprecated: mesh[dim] is a sub-mesh; use mesh[dim].get_group().{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return target

    def destroy(self) -> None:
        """Free the communicators the mesh built (not the one it was given).

        >>> import nbcoll
        >>> from nbcoll.parallel import DeviceMesh
        >>> comm = nbcoll.init()
        >>> mesh = DeviceMesh(comm, (1,), mesh_dim_names=("dp",))
        >>> mesh.destroy()
        >>> comm.closed                                # the given communicator stays open
        False
        >>> comm.destroy()
        """
        for sub in self._owned:
            sub.destroy()
        self._owned.clear()

    def __repr__(self) -> str:
        sizes = ", ".join(f"{d}={s}" for d, s in zip(self.mesh_dim_names, self.shape, strict=True))
        return f"DeviceMesh({sizes}; rank {self.world.rank} at {self.coords})"


class _OwningMesh(DeviceMesh):
    """A mesh over a world communicator it made itself, which ``destroy`` frees too."""

    def destroy(self) -> None:
        super().destroy()
        self.world.destroy()


def init_device_mesh(
    device_type: str,
    mesh_shape: Sequence[int],
    *,
    mesh_dim_names: Sequence[str] | None = None,
    comm: Communicator | None = None,
) -> DeviceMesh:
    """PyTorch's ``init_device_mesh``: a mesh of ``mesh_shape`` over ``comm`` (by default a new world communicator,
    freed with the mesh).

    ``device_type`` ("cpu" or "cuda") is checked and recorded only: where nbcoll's arrays live is the backend's
    choice (``NBCOLL_BACKEND``), one for the whole process.

    >>> from nbcoll.parallel import init_device_mesh
    >>> mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    >>> mesh.mesh_dim_names, mesh["dp"].size()
    (('dp', 'tp'), 1)
    >>> mesh.destroy()
    """
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type: expected 'cpu' or 'cuda', got {device_type!r}")
    if comm is not None:
        mesh = DeviceMesh(comm, mesh_shape, mesh_dim_names)
    else:
        from nbcoll.comm import init  # the world communicator, as nbcoll.init() gives it

        world = init()
        try:
            mesh = _OwningMesh(world, mesh_shape, mesh_dim_names)
        except BaseException:
            world.destroy()
            raise
    mesh.device_type = device_type
    return mesh


__all__ = ["DIMS", "DeviceMesh", "init_device_mesh"]
