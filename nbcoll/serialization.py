"""Checkpoints that cannot run code: ``nbcoll.save(obj, path)`` and ``nbcoll.load(path)``.

Example::

    nbcoll.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}, "ckpt.npz")
    state = nbcoll.load("ckpt.npz")
    model.load_state_dict(state["model"])

**Format.** A checkpoint is a NumPy ``.npz`` file (a zip of ``.npy`` arrays): every array of ``obj`` is one member
(``a0``, ``a1``, ...), and one more member, ``__nbcoll__``, holds UTF-8 JSON that describes the rest::

    {"format": "nbcoll-checkpoint", "version": 1,
     "tree": {"kind": "dict", "items": [["model", {"kind": "dict", ...}], ["epoch", 3]]}}

In the tree, ``None``, booleans, integers, floats and strings are themselves; containers and arrays are tagged
objects: ``dict`` (keys are strings or integers, in order), ``list``, ``tuple``, ``array`` (a member name),
``tensor`` (a member name and ``requires_grad``; loaded as an ``nbcoll.Tensor`` on the current backend) and
``scalar`` (a NumPy scalar, kept as a 0-d member so that its dtype survives). Arrays round-trip bit for bit,
NaN payloads included; floats through JSON keep their exact value (Python writes the shortest repr that reads
back the same double).

**Safety.** Loading never unpickles: the arrays are read with ``numpy.load(allow_pickle=False)``, which refuses
object arrays, and anything that is not a zip archive with the metadata member, such as a pickle renamed to
``.npz``, is refused before NumPy reads it. Every failure is a :class:`CheckpointError` that names the file.

**Atomic write.** The checkpoint is written to a temporary file in the same directory, flushed to disk with
``fsync``, then renamed over ``path`` with ``os.replace``, which is atomic on POSIX: a reader sees the old file or
the new one, never half of one. A crash mid-save leaves the previous checkpoint intact (and, for a crash that kills
the process, a ``.<name>.*.tmp`` file beside it, which is safe to delete). A new file gets the mode the umask
gives (``0666 & ~umask``, as ``open`` would, 0644 under the usual umask 022); a replaced file keeps its mode.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import stat
import zipfile
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.tensors import Tensor

FORMAT_NAME = "nbcoll-checkpoint"
FORMAT_VERSION = 1
METADATA_MEMBER = "__nbcoll__"
_ZIP_MAGIC = b"PK\x03\x04"

PathLike = str | os.PathLike


class CheckpointError(ValueError):
    """A file is not a readable nbcoll checkpoint: not an npz, truncated, corrupt, or of an unknown version.

    Example::

        try:
            state = nbcoll.load("ckpt.npz")
        except CheckpointError as error:    # the message names the file and what is wrong with it
            print(error)
    """


# ---------------------------------------------------------------------------------------------------------------
# obj -> (JSON tree, arrays) and back.


class _Encoder:
    """Walks ``obj`` once, replacing every array by a member name and collecting the arrays."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def _member(self, array: np.ndarray, where: str) -> str:
        if array.dtype.kind not in "biufc" or array.dtype.fields is not None:
            raise TypeError(f"{where}: arrays of dtype {array.dtype} cannot be saved (numbers and booleans only)")
        name = f"a{len(self.arrays)}"
        self.arrays[name] = array
        return name

    def encode(self, obj: Any, where: str) -> Any:
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int | float) and not isinstance(obj, np.generic):
            return obj
        if isinstance(obj, np.generic):
            return {"kind": "scalar", "member": self._member(np.asarray(obj), where)}
        if isinstance(obj, Tensor):
            member = self._member(obj.numpy(), where)
            return {"kind": "tensor", "member": member, "requires_grad": obj.requires_grad}
        if isinstance(obj, np.ndarray) or memory.is_device_array(obj):
            return {"kind": "array", "member": self._member(np.asarray(memory.to_host(obj)), where)}
        if isinstance(obj, dict):
            items = []
            for key, value in obj.items():
                if isinstance(key, bool) or not isinstance(key, str | int):
                    raise TypeError(f"{where}: dict keys must be strings or integers, got {key!r}")
                items.append([key, self.encode(value, f"{where}[{key!r}]")])
            return {"kind": "dict", "items": items}
        if isinstance(obj, list | tuple):
            kind = "list" if isinstance(obj, list) else "tuple"
            return {"kind": kind, "items": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        raise TypeError(
            f"{where}: cannot save a {type(obj).__name__}; checkpoints hold dicts, lists, tuples, arrays, Tensors, "
            "numbers, strings and None"
        )


def _decode(node: Any, arrays: Any, path: str) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or "kind" not in node:
        raise CheckpointError(f"{path}: corrupt metadata (unexpected entry {node!r:.80})")
    kind = node["kind"]
    if kind == "dict":
        return {key: _decode(value, arrays, path) for key, value in node["items"]}
    if kind in ("list", "tuple"):
        items = [_decode(value, arrays, path) for value in node["items"]]
        return items if kind == "list" else tuple(items)
    if kind in ("array", "tensor", "scalar"):
        array = _read_member(arrays, node["member"], path)
        if kind == "scalar":
            return array[()]
        if kind == "tensor":
            return Tensor(array, requires_grad=bool(node["requires_grad"]))
        return array
    raise CheckpointError(f"{path}: corrupt metadata (unknown kind {kind!r})")


def _read_member(arrays: Any, name: str, path: str) -> np.ndarray:
    try:
        return arrays[name]
    except KeyError:
        raise CheckpointError(f"{path}: corrupt checkpoint (array {name!r} is missing)") from None
    except ValueError as exc:  # an object array: NumPy refuses to unpickle it
        raise CheckpointError(f"{path}: array {name!r} cannot be loaded safely ({exc})") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({exc})") from None


# ---------------------------------------------------------------------------------------------------------------
# Writing and reading files.


def _write_npz(file: Any, arrays: dict[str, np.ndarray]) -> None:
    """Write the npz archive to an open binary file (a separate function so tests can simulate a crash here)."""
    np.savez(file, **arrays)


def save(obj: Any, path: PathLike) -> None:
    """Write ``obj`` (nested dicts, lists and tuples of arrays, Tensors, numbers, strings, None) to ``path``.

    Example::

        >>> import os, tempfile, numpy as np, nbcoll
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
        >>> nbcoll.save({"weights": [np.ones(2), nbcoll.tensor([3.0])], "step": 100}, path)
        >>> nbcoll.load(path)["step"]
        100

    The file is replaced atomically; ``path`` is used as given (no ``.npz`` is appended).
    """
    path = os.fspath(path)
    encoder = _Encoder()
    tree = encoder.encode(obj, "obj")
    metadata = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, "tree": tree})
    arrays = {**encoder.arrays, METADATA_MEMBER: np.frombuffer(metadata.encode("utf-8"), dtype=np.uint8)}

    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = _create_temporary(directory, name)
    try:
        _keep_mode(fd, path)
        with os.fdopen(fd, "wb") as file:
            _write_npz(file, arrays)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def _create_temporary(directory: str, name: str) -> tuple[int, str]:
    """A new ``.<name>.*.tmp`` file beside the checkpoint, created with mode 0666 for the kernel to apply the umask.

    ``tempfile.mkstemp`` would give 0600 whatever the umask; reading the umask instead (``os.umask`` sets it to
    read it) would race with other threads creating files.
    """
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"path: could not create a temporary file beside {os.path.join(directory, name)!r}")


def _keep_mode(fd: int, path: str) -> None:
    """Give the temporary file the mode of the file it will replace, if there is one."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    os.fchmod(fd, mode)


def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable; some file systems cannot open a directory, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path: PathLike) -> Any:
    """Read a checkpoint written by :func:`save`; arrays come back as NumPy arrays, Tensors as Tensors.

    Example::

        >>> import os, tempfile, numpy as np, nbcoll
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
        >>> nbcoll.save({"weights": [np.ones(2), nbcoll.tensor([3.0])], "step": 100}, path)
        >>> state = nbcoll.load(path)
        >>> state["step"], state["weights"][0], type(state["weights"][1]).__name__
        (100, array([1., 1.]), 'Tensor')

    Raises :class:`CheckpointError`, naming the file, for anything that is not a complete checkpoint of a
    known version; no byte of the file is ever unpickled.
    """
    path = os.fspath(path)
    with open(path, "rb") as file:
        data = file.read()
    return _load_bytes(data, path)


def _load_bytes(data: bytes, path: str) -> Any:
    """:func:`load` of a file's bytes already read, so a caller can check a digest of exactly what is loaded."""
    if not data.startswith(_ZIP_MAGIC):
        raise CheckpointError(f"{path}: not an nbcoll checkpoint (not an npz archive; pickles are never loaded)")
    try:
        arrays = np.load(io.BytesIO(data), allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({exc})") from None
    with arrays:
        if METADATA_MEMBER not in arrays.files:
            raise CheckpointError(f"{path}: not an nbcoll checkpoint (an npz without the {METADATA_MEMBER} entry)")
        raw = _read_member(arrays, METADATA_MEMBER, path)
        try:
            metadata = json.loads(raw.tobytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{path}: corrupt metadata ({exc})") from None
        if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_NAME:
            raise CheckpointError(f"{path}: not an nbcoll checkpoint (metadata format is not {FORMAT_NAME!r})")
        version = metadata.get("version")
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"{path}: checkpoint format version {version!r} is not supported (this nbcoll reads version "
                f"{FORMAT_VERSION})"
            )
        try:
            return _decode(metadata["tree"], arrays, path)
        except (KeyError, TypeError) as exc:
            raise CheckpointError(f"{path}: corrupt metadata ({type(exc).__name__}: {exc})") from None


__all__ = ["FORMAT_VERSION", "CheckpointError", "load", "save"]
