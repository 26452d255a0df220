"""nbcoll.save / nbcoll.load: bit-exact round trips, no unpickling ever, clear errors, atomic replacement."""

import math
import os
import pickle
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nbcoll
from nbcoll import serialization
from nbcoll.serialization import CheckpointError


def sample_state(rng):
    nan_with_payload = np.array([0x7FF8_0000_DEAD_BEEF], dtype=np.uint64).view(np.float64)
    return {
        "model": {
            "w16": rng.standard_normal((3, 4)).astype(np.float16),
            "w32": rng.standard_normal((2, 5)).astype(np.float32),
            "w64": np.concatenate([rng.standard_normal(3), nan_with_payload, [np.inf, -0.0]]),
            "empty": np.zeros((0, 3), np.int8),
            "zero_d": np.array(7, np.uint64),
            "mask": np.array([True, False]),
            "c": np.array([1 + 2j], np.complex64),
        },
        "optimizer": {
            "state": {0: {"step": 3, "exp_avg": np.arange(4.0)}},
            "param_groups": [{"lr": 0.1, "params": [0]}],
        },
        "tensor": nbcoll.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True),
        "frozen": nbcoll.tensor(np.array([1, 2], np.int64)),
        "numbers": [1, -(2**70), 0.1, math.inf, -0.0, 1e-310, True, None, "text ✓", np.float32(1.5), np.int16(-3)],
        "pair": (1, "a"),
        "": {},
    }


def assert_same(a, b, where="obj"):
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, nbcoll.Tensor):
        assert a.requires_grad == b.requires_grad, where
        assert_same(a.numpy(), b.numpy(), where)
    elif isinstance(a, np.ndarray | np.generic):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), f"{where}: bytes differ"
    elif isinstance(a, float):
        assert math.copysign(1, a) == math.copysign(1, b) and (a == b or (math.isnan(a) and math.isnan(b))), where
    else:
        assert a == b, where


def test_round_trip_is_bit_exact(tmp_path, rng):
    state = sample_state(rng)
    path = tmp_path / "ckpt.npz"
    nbcoll.save(state, path)
    assert_same(nbcoll.load(path), state)
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary file left behind
    with np.load(path, allow_pickle=False) as archive:  # an ordinary npz, readable by NumPy alone
        assert serialization.METADATA_MEMBER in archive.files


def test_unsupported_objects_are_named(tmp_path):
    with pytest.raises(TypeError, match=r"obj\['a'\]\[1\]: cannot save a set"):
        nbcoll.save({"a": [1, {2}]}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="dict keys must be strings or integers"):
        nbcoll.save({(1, 2): 3}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="dtype object cannot be saved"):
        nbcoll.save({"a": np.array([None])}, tmp_path / "x.npz")
    assert not os.listdir(tmp_path)


class MakesAMarker:
    """Unpickling this object would create a file: the proof that a loader ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_renamed_to_npz_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "was_unpickled"
    path = tmp_path / "evil.npz"
    path.write_bytes(pickle.dumps({"model": MakesAMarker(marker)}))
    with pytest.raises(CheckpointError, match=r"evil\.npz: not an nbcoll checkpoint"):
        nbcoll.load(path)
    assert not marker.exists()


def test_an_npz_with_a_pickled_object_array_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "was_unpickled"
    path = tmp_path / "evil.npz"
    nbcoll.save({"w": np.zeros(2)}, path)
    with np.load(path) as archive:
        members = {name: archive[name] for name in archive.files}
    members["a0"] = np.array([MakesAMarker(marker)], dtype=object)  # the entry the metadata points to
    with open(path, "wb") as file:
        np.savez(file, **members)
    with pytest.raises(CheckpointError, match=r"evil\.npz: array 'a0' cannot be loaded safely"):
        nbcoll.load(path)
    assert not marker.exists()


def test_truncated_corrupt_foreign_and_future_files_get_clear_errors(tmp_path, rng):
    good = tmp_path / "good.npz"
    nbcoll.save(sample_state(rng), good)
    data = good.read_bytes()

    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"truncated\.npz: corrupt or truncated"):
        nbcoll.load(truncated)

    corrupt = tmp_path / "corrupt.npz"
    middle = len(data) // 3
    corrupt.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 64]) + data[middle + 64 :])
    with pytest.raises(CheckpointError, match=r"corrupt\.npz"):
        nbcoll.load(corrupt)

    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, x=np.zeros(3))
    with pytest.raises(CheckpointError, match=r"foreign\.npz: not an nbcoll checkpoint"):
        nbcoll.load(foreign)

    future = tmp_path / "future.npz"
    meta = b'{"format": "nbcoll-checkpoint", "version": 99, "tree": null}'
    np.savez(future, __nbcoll__=np.frombuffer(meta, np.uint8))
    with pytest.raises(CheckpointError, match=r"future\.npz: checkpoint format version 99 is not supported"):
        nbcoll.load(future)

    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"empty\.npz"):
        nbcoll.load(empty)


def test_a_failure_mid_save_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    nbcoll.save({"epoch": 1, "w": np.ones(1000)}, path)

    def crash_halfway(file, arrays):
        file.write(b"PK\x03\x04 half an archive")
        raise OSError("disk full")

    monkeypatch.setattr(serialization, "_write_npz", crash_halfway)
    with pytest.raises(OSError, match="disk full"):
        nbcoll.save({"epoch": 2, "w": np.zeros(1000)}, path)
    assert nbcoll.load(path)["epoch"] == 1
    assert os.listdir(tmp_path) == ["ckpt.npz"]


def test_a_process_killed_mid_save_leaves_the_old_checkpoint(tmp_path):
    path = tmp_path / "ckpt.npz"
    nbcoll.save({"epoch": 1}, path)
    code = textwrap.dedent(
        f"""
        import os
        import numpy as np
        import nbcoll
        from nbcoll import serialization

        def die_mid_write(file, arrays):
            file.write(b"PK\\x03\\x04 partial")
            file.flush()
            os._exit(9)  # no cleanup, no exception handler: as if the machine lost power

        serialization._write_npz = die_mid_write
        nbcoll.save({{"epoch": 2}}, {str(path)!r})
        """
    )
    env = {**os.environ, "NBCOLL_BACKEND": "numpy"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300)
    assert proc.returncode == 9, proc.stderr.decode()[-2000:]
    assert nbcoll.load(path) == {"epoch": 1}
    leftovers = [name for name in os.listdir(tmp_path) if name != "ckpt.npz"]
    assert leftovers and all(name.startswith(".ckpt.npz.") and name.endswith(".tmp") for name in leftovers)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path, umask):
    path = tmp_path / "ckpt.npz"
    old = os.umask(umask)
    try:
        nbcoll.save({"epoch": 1}, path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask


def test_replacing_a_file_keeps_its_mode(tmp_path):
    path = tmp_path / "ckpt.npz"
    nbcoll.save({"epoch": 1}, path)
    os.chmod(path, 0o640)
    old = os.umask(0o077)
    try:
        nbcoll.save({"epoch": 2}, path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640 and nbcoll.load(path) == {"epoch": 2}
    assert os.listdir(tmp_path) == ["ckpt.npz"]
