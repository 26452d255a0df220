"""Sharded checkpoints are all or nothing: a failed or interrupted save leaves the previous checkpoint loadable,
and a directory whose files come from different saves is refused, never loaded as a mix of two steps.

The ranks are threads of this process (``nbcoll.comm.loopback``); ``tests/mpi_scripts/parallel_checkpoint.py``
covers resuming and re-sharding under mpiexec.
"""

import os
import shutil
import tempfile
import threading
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbcoll
from nbcoll import nn, optim, serialization
from nbcoll.comm import loopback
from nbcoll.parallel import fully_shard, gathered_parameters
from nbcoll.parallel.checkpoint import load_sharded, save_sharded
from nbcoll.serialization import CheckpointError


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


SEEDING = threading.Lock()  # the ranks are threads, and the random generator is the process's


def build(comm):
    with SEEDING:
        nbcoll.manual_seed(0)
        layers = nn.Sequential(nn.Linear(3, 5, dtype=np.float64), nn.Tanh(), nn.Linear(5, 2, dtype=np.float64))
    model = fully_shard(layers, comm)  # 5 rows: uneven shards on 2, 3 and 4 ranks
    return model, optim.Adam(model.parameters(), lr=0.1)


def step(model, optimizer, comm, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 3))[np.array_split(np.arange(4), comm.size)[comm.rank]]
    optimizer.zero_grad()
    (model(nbcoll.tensor(x)) ** 2).sum().backward()
    optimizer.step()


def save_two_steps(directory: str, nranks: int, fail_on_rank: int | None = None, keep_first: bool = True):
    """Checkpoint after step 1 (unless ``keep_first`` is False), then again after step 2, the rank
    ``fail_on_rank`` raising before it writes; returns the whole parameters after each step."""
    after = {}
    lock = threading.Lock()

    def body(comm):
        model, optimizer = build(comm)
        step(model, optimizer, comm, 1)
        if keep_first:
            save_sharded(model, optimizer, directory, comm)
        first = gathered_parameters(model)
        step(model, optimizer, comm, 2)
        second = gathered_parameters(model)
        with lock:
            after.update(first=first, second=second)
        save_sharded(model, _Broken() if comm.rank == fail_on_rank else optimizer, directory, comm)

    try:
        loopback.run(nranks, body)
        error = None
    except Exception as exc:
        error = exc
    return after["first"], after["second"], error


class _Broken:
    """An optimizer whose state cannot be written: as if this rank's disk were full."""

    def state_dict(self):
        raise OSError("no space left on device")


def load_on(nranks: int, directory: str):
    def body(comm):
        model, optimizer = build(comm)
        load_sharded(model, optimizer, directory, comm)
        return gathered_parameters(model)

    return loopback.run(nranks, body)[0]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_a_save_that_fails_on_one_rank_leaves_the_previous_checkpoint(tmp_path, nranks):
    directory = str(tmp_path / "ckpt")
    first, second, error = save_two_steps(directory, nranks, fail_on_rank=nranks - 1)
    assert same(load_on(nranks, directory), first), "the directory must hold the step-1 checkpoint, whole"
    assert isinstance(error, RuntimeError), error
    assert f"save_sharded: rank(s) [{nranks - 1}] of {nranks} could not write" in str(error)
    assert len([name for name in os.listdir(directory) if name.startswith("rank")]) == nranks  # no new files left
    _, _, error = save_two_steps(directory, nranks)  # and the next save replaces it
    assert error is None and same(load_on(nranks, directory), second)


def test_one_rank_saves_too(tmp_path):
    directory = str(tmp_path / "ckpt")
    first, second, error = save_two_steps(directory, 1)
    assert error is None and same(load_on(1, directory), second) and not same(first, second)
    assert sorted(os.listdir(directory))[0] == "index.npz" and len(os.listdir(directory)) == 2


def test_files_of_two_saves_are_refused_naming_the_directory_and_the_file(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    save_two_steps(a, 2)
    save_two_steps(b, 2, keep_first=False)
    (name_a,) = [n for n in os.listdir(a) if n.startswith("rank00001")]
    (name_b,) = [n for n in os.listdir(b) if n.startswith("rank00001")]
    shutil.copy(os.path.join(b, name_b), os.path.join(a, name_a))  # rank 1's file of another save, same step
    with pytest.raises(CheckpointError, match=rf"directory: {a!r}: {name_a} is not the file save .* wrote"):
        load_on(2, a)
    os.remove(os.path.join(a, name_a))
    with pytest.raises(CheckpointError, match=rf"directory: {a!r}: {name_a} is missing"):
        load_on(2, a)
    os.remove(os.path.join(a, "index.npz"))
    with pytest.raises(CheckpointError, match=rf"directory: {a!r} holds no sharded checkpoint"):
        load_on(2, a)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    nranks=st.integers(1, 4),
    fail_at=st.integers(0, 5),  # the k-th file write raises: ranks' files, then the index; past them, none
    half_written=st.booleans(),
    previous=st.booleans(),
    load_ranks=st.integers(1, 4),
)
def test_an_interrupted_save_loads_whole_or_is_refused_never_as_a_mix(
    nranks, fail_at, half_written, previous, load_ranks
):
    writes, lock = [0], threading.Lock()
    real_write = serialization._write_npz

    def write_or_fail(file, arrays):
        with lock:
            k, writes[0] = writes[0], writes[0] + 1
        if k == fail_at + (1 if previous else 0) * (nranks + 1):  # count the writes of the second save only
            if half_written:
                file.write(b"PK\x03\x04 half an archive")
            raise OSError(f"write {k} failed")
        real_write(file, arrays)

    with tempfile.TemporaryDirectory() as root, mock.patch.object(serialization, "_write_npz", write_or_fail):
        directory = os.path.join(root, "ckpt")
        first, second, error = save_two_steps(directory, nranks, keep_first=previous)
        failed = fail_at <= nranks  # n rank files and one index
        assert (error is not None) == failed, error
        if not failed:
            assert same(load_on(load_ranks, directory), second)
        elif previous:
            assert same(load_on(load_ranks, directory), first)  # the old checkpoint, whole
        else:
            with pytest.raises(CheckpointError, match="holds no sharded checkpoint"):
                load_on(load_ranks, directory)
