"""Sharded checkpoints of a fully sharded model: each rank writes its own shards; loading re-shards.

A checkpoint is a directory of files in nbcoll's safe format (:func:`nbcoll.save`)::

    index.npz        {"format": "nbcoll-sharded", "ranks": n, "parameters": {name: {"shape": [...]}}}
    rank00000.npz    {"model": {name: this rank's shard}, "optimizer": optimizer.state_dict()}
    rank00001.npz    ...

Saving needs no communication beyond a final barrier. Loading reads every rank's file, puts each parameter (and
each optimizer state of a parameter's shape) back together, drops the old padding, and cuts it again for the
current rank count, so a checkpoint written on 4 ranks loads on 2 or on 3::

    whole = concat(shard of rank 0, ..., shard of rank n_old - 1)[:rows]
    shard = pad(whole, R_new * n_new rows)[rank * R_new : (rank + 1) * R_new]

Example::

    save_sharded(model, optimizer, "ckpt/step100", comm)
    ...
    load_sharded(model, optimizer, "ckpt/step100", comm)   # any rank count; the model was fully_shard-ed
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll.nn import Module
from nbcoll.nn.parameter import write_values
from nbcoll.serialization import load, save

if TYPE_CHECKING:
    from nbcoll.comm import Communicator
    from nbcoll.parallel.fsdp import Unit

FORMAT = "nbcoll-sharded"


def _sharded_parameters(model: Module) -> dict[str, tuple[Unit, int]]:
    """Dotted name -> (unit, position in the unit) of every sharded parameter of ``model``."""
    found = {}
    for prefix, layer in model.named_modules():
        unit = getattr(layer, "_fully_sharded", None)
        if unit is not None:
            for k, name in enumerate(unit.names):
                found[f"{prefix}.{name}" if prefix else name] = (unit, k)
    if not found:
        raise ValueError("model: has no parameters sharded by fully_shard; use nbcoll.save for a plain model")
    return found


def _rank_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank:05d}.npz")


def reshard(pieces: list[np.ndarray], rows: int, ranks: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s dim-0 shard, for ``ranks`` ranks, of the array whose old shards are ``pieces``."""
    whole = np.concatenate(pieces)[:rows]
    per_rank = -(-rows // ranks)
    padded = np.zeros((per_rank * ranks,) + whole.shape[1:], whole.dtype)
    padded[:rows] = whole
    return padded[rank * per_rank : (rank + 1) * per_rank]


def save_sharded(model: Module, optimizer: Any, directory: str | os.PathLike, comm: Communicator) -> None:
    """Collective: every rank writes its shards (and its optimizer's state) into ``directory``.

    >>> import os, tempfile, nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import fully_shard, save_sharded
    >>> comm = nbcoll.init()
    >>> model = fully_shard(nn.Sequential(nn.Linear(3, 2)), comm)
    >>> optimizer = nbcoll.optim.Adam(model.parameters(), lr=0.1)
    >>> directory = tempfile.mkdtemp()
    >>> save_sharded(model, optimizer, directory, comm)
    >>> sorted(os.listdir(directory))                          # one file per rank, and a description
    ['index.npz', 'rank00000.npz']
    >>> comm.destroy()
    """
    directory = os.fspath(directory)
    sharded = _sharded_parameters(model)
    os.makedirs(directory, exist_ok=True)
    shards = {name: unit.shards[k].numpy() for name, (unit, k) in sharded.items()}
    state = optimizer.state_dict() if optimizer is not None else None
    save({"model": shards, "optimizer": state}, _rank_file(directory, comm.rank))
    if comm.rank == 0:
        parameters = {name: {"shape": list(unit.shapes[k])} for name, (unit, k) in sharded.items()}
        save({"format": FORMAT, "ranks": comm.size, "parameters": parameters}, os.path.join(directory, "index.npz"))
    comm.barrier()  # the checkpoint is complete when anyone returns


def load_sharded(model: Module, optimizer: Any, directory: str | os.PathLike, comm: Communicator) -> None:
    """Collective: load a checkpoint of :func:`save_sharded`, written on any number of ranks, re-sharding it.

    >>> import tempfile, numpy as np, nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import fully_shard, gathered_parameters, load_sharded, save_sharded
    >>> comm = nbcoll.init()
    >>> make = lambda: fully_shard(nn.Sequential(nn.Linear(3, 2)), comm)
    >>> model, resumed = make(), make()
    >>> directory = tempfile.mkdtemp()
    >>> save_sharded(model, nbcoll.optim.SGD(model.parameters(), lr=0.1), directory, comm)
    >>> load_sharded(resumed, nbcoll.optim.SGD(resumed.parameters(), lr=0.1), directory, comm)
    >>> before, after = gathered_parameters(model), gathered_parameters(resumed)
    >>> all(np.array_equal(before[name], after[name]) for name in before)
    True
    >>> comm.destroy()
    """
    directory = os.fspath(directory)
    index = load(os.path.join(directory, "index.npz"))
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"directory: {directory!r} holds no sharded checkpoint index (index.npz of {FORMAT})")
    old_ranks = int(index["ranks"])
    files = [load(_rank_file(directory, r)) for r in range(old_ranks)]
    sharded = _sharded_parameters(model)
    missing = sorted(set(sharded) - set(index["parameters"]))
    unexpected = sorted(set(index["parameters"]) - set(sharded))
    if missing or unexpected:
        raise ValueError(
            f"directory: the checkpoint does not fit the model: missing {missing}, unexpected {unexpected}"
        )
    by_id = {}
    for name, (unit, k) in sharded.items():
        shape = tuple(index["parameters"][name]["shape"])
        if shape != unit.shapes[k]:
            raise ValueError(
                f"directory: parameter {name!r} has shape {shape} in the checkpoint, {unit.shapes[k]} here"
            )
        pieces = [f["model"][name] for f in files]
        write_values(unit.shards[k], reshard(pieces, shape[0], comm.size, comm.rank))
        by_id[id(unit.shards[k])] = (pieces[0].shape, shape[0])
    if optimizer is not None:
        optimizer.load_state_dict(_resharded_optimizer_state(optimizer, files, by_id, comm))


def _resharded_optimizer_state(optimizer: Any, files: list[dict], by_id: dict, comm: Communicator) -> dict:
    """The optimizer's saved states, each array of its parameter's old shard shape re-sharded like the parameter."""
    saved = [f["optimizer"] for f in files]
    if any(s is None for s in saved):
        raise ValueError("directory: the checkpoint was saved without an optimizer state")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for key, first in saved[0]["state"].items():
        old_shape, rows = by_id[id(params[int(key)])]
        state[key] = {}
        for name, value in first.items():
            if isinstance(value, np.ndarray) and value.shape == old_shape:
                value = reshard([s["state"][key][name] for s in saved], rows, comm.size, comm.rank)
            state[key][name] = value  # numbers (step counts) are the same on every rank
    return {"state": state, "param_groups": saved[0]["param_groups"]}


__all__ = ["load_sharded", "reshard", "save_sharded"]
