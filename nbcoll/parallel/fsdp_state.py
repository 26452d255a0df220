"""A fully sharded model's state: each rank's shard with its place in the whole parameter, and the whole gathered.

``state_dict()`` of a model that :func:`~nbcoll.parallel.fsdp.fully_shard` sharded moves nothing: it is
:func:`sharded_state_dict`, each parameter's name mapped to a :class:`Shard`. :func:`gathered_parameters` is the
collective that puts every parameter back together, on every rank.

Example::

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import fully_shard
    >>> from nbcoll.parallel.fsdp_state import gathered_parameters, sharded_state_dict
    >>> comm = nbcoll.init()
    >>> model = fully_shard(nn.Sequential(nn.Linear(3, 2)), comm)
    >>> sharded_state_dict(model)["0.weight"].shape, gathered_parameters(model)["0.bias"].shape
    ((2, 3), (2,))
    >>> comm.destroy()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.nn import Module


@dataclass
class Shard:
    """One rank's piece of a sharded parameter, as ``state_dict()`` of a fully sharded model gives it.

    ``local`` is this rank's rows, padding included (the last ranks' shards may be partly or wholly padding);
    they are rows ``[row_offset, row_offset + valid_rows)`` of the whole parameter of shape ``shape``.
    ``numpy.asarray(shard)`` is ``local``, so ``load_state_dict`` takes a state dict of shards back unchanged.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import fully_shard
        >>> comm = nbcoll.init()
        >>> model = fully_shard(nn.Sequential(nn.Linear(3, 2)), comm)
        >>> shard = model.state_dict()["0.weight"]
        >>> whole = np.zeros(shard.shape)
        >>> shard.place(whole)           # whole[row_offset : row_offset + valid_rows] = local[:valid_rows]
        >>> shard.shape, whole.shape
        ((2, 3), (2, 3))
        >>> comm.destroy()
    """

    local: np.ndarray
    row_offset: int
    valid_rows: int
    shape: tuple[int, ...]

    def place(self, whole: np.ndarray) -> None:
        """Write this rank's rows, without padding, into ``whole`` (an array of the whole parameter's shape).

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import fully_shard
        >>> comm = nbcoll.init()
        >>> model = fully_shard(nn.Sequential(nn.Linear(2, 2, bias=False)), comm)
        >>> _ = nn.init.ones_(model[0].weight)
        >>> whole = np.zeros((2, 2))
        >>> model.state_dict()["0.weight"].place(whole)     # on one rank, the shard is every row
        >>> whole
        array([[1., 1.],
               [1., 1.]])
        >>> comm.destroy()
        """
        if tuple(whole.shape) != self.shape:
            raise ValueError(f"whole: expected an array of the whole parameter's shape {self.shape}, got {whole.shape}")
        whole[self.row_offset : self.row_offset + self.valid_rows] = self.local[: self.valid_rows]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.local if dtype is None else self.local.astype(dtype)


def sharded_state_dict(module: Module) -> dict[str, Any]:
    """Name -> :class:`Shard` of each sharded parameter, name -> array of each persistent buffer; no communication.

    ``fully_shard`` makes this the model's ``state_dict()``.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import fully_shard, sharded_state_dict
    >>> comm = nbcoll.init()
    >>> model = fully_shard(nn.Sequential(nn.Linear(3, 2)), comm)
    >>> {name: type(value).__name__ for name, value in sharded_state_dict(model).items()}
    {'0.weight': 'Shard', '0.bias': 'Shard'}
    >>> comm.destroy()
    """
    state = {name: tensor.numpy() for name, tensor in Module.state_dict(module, keep_vars=True).items()}
    for prefix, layer in module.named_modules():
        unit = getattr(layer, "_fully_sharded", None)
        if unit is None:
            continue
        for name, shard, shape in zip(unit.names, unit.shards, unit.shapes, strict=True):
            rows = unit.rows(shape)
            offset = unit.comm.rank * rows
            key = f"{prefix}.{name}" if prefix else name
            state[key] = Shard(shard.numpy(), offset, max(0, min(rows, shape[0] - offset)), tuple(shape))
    return state


def gathered_parameters(module: Module) -> dict[str, np.ndarray]:
    """Collective: name -> the whole parameter (a NumPy array) of a fully sharded module, on every rank.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import fully_shard, gathered_parameters
    >>> comm = nbcoll.init()
    >>> model = fully_shard(nn.Sequential(nn.Linear(3, 2)), comm)
    >>> {name: array.shape for name, array in gathered_parameters(model).items()}
    {'0.weight': (2, 3), '0.bias': (2,)}
    >>> comm.destroy()
    """
    result = {}
    for prefix, layer in module.named_modules():
        unit = getattr(layer, "_fully_sharded", None)
        if unit is None:
            continue
        for name, full in zip(unit.names, unit.gather(masters=True), strict=True):
            result[f"{prefix}.{name}" if prefix else name] = memory.to_host(full)
    return result
