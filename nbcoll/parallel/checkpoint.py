"""Sharded checkpoints of a fully sharded model: each rank writes its own shards; loading re-shards.

A checkpoint is a directory of files in nbcoll's safe format (:func:`nbcoll.save`); every save has an id of 16 hex
digits that names its files and ties them together::

    index.npz             {"format": "nbcoll-sharded", "version": 2, "save_id": id, "ranks": n,
                           "parameters": {name: {"shape": [...]}},
                           "files": [{"name": "rank00000-<id>.npz", "rank": 0, "sha256": hex digest}, ...]}
    rank00000-<id>.npz    {"save_id": id, "rank": 0, "model": {name: this rank's shard}, "optimizer": state_dict}
    rank00001-<id>.npz    ...

**Saving is all or nothing.** Every rank writes its file under the new id, beside the files of the checkpoint
already there, which nothing touches yet. The ranks then exchange what happened (each rank's digest, or that it
failed), so no rank waits forever on a rank that raised and every rank raises if any failed. Only when all
succeeded does rank 0 write the index, which :func:`nbcoll.save` replaces atomically: that rename is the moment
the new checkpoint replaces the old one. Then the old files are deleted. A save interrupted at any point leaves
the previous checkpoint loadable as it was (and, if the process was killed, files of the new id that no index
names, which the next save deletes).

**Loading checks the index.** Every file it names must be present, of the same save id and of the digest the
index records; otherwise :func:`load_sharded` raises a :class:`~nbcoll.serialization.CheckpointError` naming the
directory and the file, rather than put together shards of two different steps.

Loading reads every rank's file, puts each parameter (and each optimizer state of a parameter's shape) back
together, drops the old padding, and cuts it again for the current rank count, so a checkpoint written on 4 ranks
loads on 2 or on 3::

    whole = concat(shard of rank 0, ..., shard of rank n_old - 1)[:rows]
    shard = pad(whole, R_new * n_new rows)[rank * R_new : (rank + 1) * R_new]

Example::

    save_sharded(model, optimizer, "ckpt/step100", comm)
    ...
    load_sharded(model, optimizer, "ckpt/step100", comm)   # any rank count; the model was fully_shard-ed
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.nn import Module
from nbcoll.nn.parameter import write_values
from nbcoll.serialization import CheckpointError, _load_bytes, load, save

if TYPE_CHECKING:
    from nbcoll.comm import Communicator
    from nbcoll.parallel.fsdp import Unit

FORMAT = "nbcoll-sharded"
VERSION = 2
INDEX = "index.npz"
_RANK_FILE = re.compile(r"rank\d{5}(-[0-9a-f]{16})?\.npz")  # this format's rank files, and version 1's


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


def _rank_file(rank: int, save_id: str) -> str:
    return f"rank{rank:05d}-{save_id}.npz"


def reshard(pieces: list[np.ndarray], rows: int, ranks: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s dim-0 shard, for ``ranks`` ranks, of the array whose old shards are ``pieces``."""
    whole = np.concatenate(pieces)[:rows]
    per_rank = -(-rows // ranks)
    padded = np.zeros((per_rank * ranks,) + whole.shape[1:], whole.dtype)
    padded[:rows] = whole
    return padded[rank * per_rank : (rank + 1) * per_rank]


def save_sharded(model: Module, optimizer: Any, directory: str | os.PathLike, comm: Communicator) -> None:
    """Collective: every rank writes its shards (and its optimizer's state) into ``directory``, all or nothing.

    If any rank fails, every rank raises and ``directory`` keeps the checkpoint it held before.

    >>> import os, tempfile, nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import fully_shard, save_sharded
    >>> comm = nbcoll.init()
    >>> model = fully_shard(nn.Sequential(nn.Linear(3, 2)), comm)
    >>> optimizer = nbcoll.optim.Adam(model.parameters(), lr=0.1)
    >>> directory = tempfile.mkdtemp()
    >>> save_sharded(model, optimizer, directory, comm)
    >>> sorted(os.listdir(directory))            # one file per rank, named by the save's id, and the index
    ['index.npz', 'rank00000-....npz']
    >>> comm.destroy()
    """
    directory = os.fspath(directory)
    sharded = _sharded_parameters(model)
    save_id = _agree_on_save_id(comm)
    name = _rank_file(comm.rank, save_id)
    digest: bytes | None = None  # stays None if this rank fails
    error: Exception | None = None
    try:
        os.makedirs(directory, exist_ok=True)
        shards = {key: unit.shards[k].numpy() for key, (unit, k) in sharded.items()}
        state = optimizer.state_dict() if optimizer is not None else None
        contents = {"save_id": save_id, "rank": comm.rank, "model": shards, "optimizer": state}
        save(contents, os.path.join(directory, name))
        digest = _sha256(os.path.join(directory, name))
    except Exception as exc:  # told to every rank below, then raised here
        error = exc
    digests = _exchange_outcomes(comm, digest)
    failed = [rank for rank, d in enumerate(digests) if d is None]
    if failed:
        if comm.rank == 0:  # every rank is past its write: the new files can go
            with contextlib.suppress(OSError):
                _remove_rank_files(directory, keep=set(), only_id=save_id)
        raise RuntimeError(
            f"save_sharded: rank(s) {failed} of {comm.size} could not write their files into {directory!r}; "
            "nothing was saved, and the checkpoint there before (if any) is unchanged"
        ) from error
    if comm.rank == 0:
        try:
            _commit(directory, save_id, sharded, digests, comm.size)
        except Exception as exc:
            error = exc
            with contextlib.suppress(OSError):  # no index names them: they are not a checkpoint
                _remove_rank_files(directory, keep=set(), only_id=save_id)
    # Did rank 0 write the index? This is also the final barrier: no rank returns before the switch.
    if _exchange_outcomes(comm, b"" if error is None else None)[0] is None:
        raise RuntimeError(
            f"save_sharded: rank 0 could not write the index of {directory!r}; the checkpoint there before (if any) "
            "is unchanged"
        ) from error


def load_sharded(model: Module, optimizer: Any, directory: str | os.PathLike, comm: Communicator) -> None:
    """Collective: load a checkpoint of :func:`save_sharded`, written on any number of ranks, re-sharding it.

    Raises :class:`~nbcoll.serialization.CheckpointError`, naming the directory and the file, if a file the index
    names is missing or is not the one that save wrote.

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
    index, files = _read_verified(directory)
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


# ---------------------------------------------------------------------------------------------------------------
# Tying a save's files together.


def _agree_on_save_id(comm: Communicator) -> str:
    """A random id of 16 hex digits, rank 0's, on every rank."""
    chosen = memory.to_device(np.array([secrets.randbits(63)], np.int64))
    comm.broadcast(chosen, root=0)
    return f"{int(memory.to_host(chosen)[0]):016x}"


def _exchange_outcomes(comm: Communicator, digest: bytes | None) -> list[bytes | None]:
    """Collective: every rank's SHA-256 digest (``b""`` when it has none to tell), or None where the rank failed.

    A rank that failed still takes part, so that the others learn of it instead of waiting for it.
    """
    mine = np.zeros(33, np.uint8)  # byte 0: succeeded; bytes 1 to 32: the digest
    if digest is not None:
        mine[0] = 1
        mine[1 : 1 + len(digest)] = np.frombuffer(digest, np.uint8)
    everyone = memory.zeros(33 * comm.size, np.uint8)
    comm.all_gather(memory.to_device(mine), everyone)
    rows = memory.to_host(everyone).reshape(comm.size, 33)
    return [row[1:].tobytes() if row[0] else None for row in rows]


def _commit(directory: str, save_id: str, sharded: dict, digests: list, ranks: int) -> None:
    """Rank 0, once every rank's file is written: replace the index (the atomic switch), then drop the old files."""
    files = [{"name": _rank_file(r, save_id), "rank": r, "sha256": d.hex()} for r, d in enumerate(digests)]
    parameters = {name: {"shape": list(unit.shapes[k])} for name, (unit, k) in sharded.items()}
    index = {"format": FORMAT, "version": VERSION, "save_id": save_id, "ranks": ranks}
    save({**index, "parameters": parameters, "files": files}, os.path.join(directory, INDEX))
    with contextlib.suppress(OSError):  # the new checkpoint is complete; a leftover is deleted by the next save
        _remove_rank_files(directory, keep={f["name"] for f in files})


def _remove_rank_files(directory: str, keep: set[str], only_id: str | None = None) -> None:
    """Delete the rank files in ``directory`` not in ``keep`` (only those of save ``only_id``, if given)."""
    for name in os.listdir(directory):
        if _RANK_FILE.fullmatch(name) and name not in keep and (only_id is None or only_id in name):
            os.remove(os.path.join(directory, name))


def _sha256(path: str) -> bytes:
    with open(path, "rb") as file:
        return hashlib.sha256(file.read()).digest()


def _read_verified(directory: str) -> tuple[dict, list[dict]]:
    """The index and every rank's file, each checked against the index: present, of its save, of its digest."""
    where = f"directory: {directory!r}"
    index_path = os.path.join(directory, INDEX)
    if not os.path.exists(index_path):
        raise CheckpointError(f"{where} holds no sharded checkpoint (no {INDEX}; a save that did not finish?)")
    index = load(index_path)
    if not isinstance(index, dict) or index.get("format") != FORMAT or index.get("version") != VERSION:
        raise CheckpointError(f"{where}: {INDEX} is not the index of a sharded checkpoint ({FORMAT} version {VERSION})")
    save_id, entries = index["save_id"], index["files"]
    if [entry["rank"] for entry in entries] != list(range(int(index["ranks"]))):
        raise CheckpointError(f"{where}: {INDEX} does not list one file per rank for {index['ranks']} ranks")
    files = []
    for entry in entries:
        name = entry["name"]
        try:
            with open(os.path.join(directory, name), "rb") as file:
                data = file.read()
        except FileNotFoundError:
            raise CheckpointError(
                f"{where}: {name} is missing; the checkpoint of save {save_id} is incomplete"
            ) from None
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointError(
                f"{where}: {name} is not the file save {save_id} wrote (its SHA-256 differs from the index's); "
                "refusing to load a mix of files"
            )
        contents = _load_bytes(data, os.path.join(directory, name))
        if contents.get("save_id") != save_id or contents.get("rank") != entry["rank"]:
            raise CheckpointError(f"{where}: {name} belongs to save {contents.get('save_id')}, not to {save_id}")
        files.append(contents)
    return index, files


__all__ = ["load_sharded", "reshard", "save_sharded"]
