"""The launch of the ring's all-gather, reduce-scatter, broadcast and reduce kernels (:mod:`.ring_device_collectives`)
in the one-GPU world, on the FIFOs and counters of a :class:`~.ring_device.DeviceRing`.

Host arrays have a row per rank. In place, as the communicator's collectives are: all-gather reads each rank's
input from its own block of ``out``, reduce-scatter writes each rank's result into its own block of ``local``,
broadcast and reduce overwrite their input. Reduce writes only the root's row, as the host's reduce writes only
the root's ``recvbuf``.

Example (on the simulator)::

    ring = DeviceRingCollectives(3, slot_elems=4, group_threads=4)
    x = np.arange(6, dtype=np.int64).reshape(3, 2)
    ring.all_gather(x, np.zeros((3, 6), np.int64))     # every row is [0, 1, 2, 3, 4, 5]
    ring.reduce(x, root=2)                             # row 2 is [6, 9]; rows 0 and 1 are as they were
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from nbcoll.comm.algorithms.ring_device import DTYPES, DeviceRing, raise_for_status
from nbcoll.comm.algorithms.ring_device_collectives import KERNELS
from nbcoll.comm.device import prims as dp


def _shapes(collective: str, n: int, local: Any, out: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes ``local`` and ``out`` must have: a row per rank, of one block of ``count`` elements or of ``n``
    (``count`` is read, as the communicator reads it, off the array of one block: all-gather's ``local``,
    reduce-scatter's ``out``); in place, the one array is the larger."""
    gather, scatter = collective == "all_gather", collective == "reduce_scatter"
    if local is out:
        count = local.shape[1] // (n if gather or scatter else 1)
    else:
        count = (out if scatter else local).shape[1]
    one, every = (n, count), (n, n * count)
    want = (one, every) if gather else (every, one) if scatter else (one, one)
    return (max(want),) * 2 if local is out else want


class DeviceRingCollectives(DeviceRing):
    """A :class:`~.ring_device.DeviceRing` that also runs the ring's all-gather, reduce-scatter, broadcast and
    reduce as kernels, on the same FIFOs and counters (a call carries on from the counts the last one left).

    >>> ring = DeviceRingCollectives(2, slot_elems=4)
    >>> ring.broadcast(np.array([[1, 2], [3, 4]]), root=1).tolist()
    [[3, 4], [3, 4]]
    """

    def launch_collective(self, collective: str, local: Any, out: Any, op: str = "sum", root: int = 0,
                          spins_before_check: int = dp.SPINS_BEFORE_CHECK_ABORT,
                          ranks_started: int | None = None) -> np.ndarray:  # fmt: skip
        """Run ``collective``'s kernel on device arrays (``out`` may be ``local``: in place) and return the status,
        ``[channel, rank] = (code, steps started)``; ``ranks_started`` launches only so many ranks' groups.

        >>> ring = DeviceRingCollectives(2, slot_elems=4)
        >>> x, y = cuda.to_device(np.ones((2, 3), np.float32)), cuda.to_device(np.zeros((2, 6), np.float32))
        >>> ring.launch_collective("all_gather", x, y)[0].tolist()    # (code, steps): copy_send, recv
        [[0, 2], [0, 2]]
        """
        if collective not in KERNELS:
            raise ValueError(f"collective: expected one of {', '.join(KERNELS)}, got {collective!r}")
        if op not in dp.OPS:
            raise ValueError(f"op: expected one of {', '.join(dp.OPS)}, got {op!r}")
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self.nranks:
            raise ValueError(f"root: expected a rank in [0, {self.nranks}), got {root!r}")
        n, in_place = self.nranks, local is out
        if local.ndim != 2 or out.ndim != 2:
            raise ValueError(f"local, out: expected 2-D arrays of {n} rows (a row per rank), got shapes "
                             f"{local.shape} and {out.shape}")  # fmt: skip
        want = _shapes(collective, n, local, out)
        if (local.shape, out.shape) != want or out.dtype != local.dtype:
            raise ValueError(f"local, out: expected shapes {want[0]} and {want[1]} of one dtype for {collective} on "
                             f"{n} ranks, got {local.shape} {local.dtype} and {out.shape} {out.dtype}")  # fmt: skip
        if np.dtype(local.dtype) not in [np.dtype(t) for t in DTYPES]:
            raise ValueError(f"local: expected one of float32, float64, int32, int64, got {local.dtype}")
        status = cuda.to_device(np.full((self.nchannels, n, 2), dp.RUNNING, np.int64))
        ranks = n if ranks_started is None else ranks_started
        args = (dp.OPS[op], int(root), int(in_place), self.group_threads, dp.SCOPES[self.scope], spins_before_check)
        KERNELS[collective][self.nchannels, ranks * self.group_threads](
            local, out, self.fifo(local.dtype), self.tail, self.head, self.abort_word, status, *args
        )
        return status.copy_to_host()

    def _run(self, collective: str, local: np.ndarray, out: np.ndarray, op: str = "sum", root: int = 0) -> Any:
        """Launch on copies of host arrays (``out is local``: in place), raise if a rank stopped; the device out."""
        d_local = cuda.to_device(local)
        d_out = d_local if out is local else cuda.to_device(out)
        raise_for_status(self.launch_collective(collective, d_local, d_out, op, root), collective)
        return d_out

    def all_gather(self, local: np.ndarray | None, out: np.ndarray) -> np.ndarray:
        """``out[r, b*count:(b+1)*count] = local[b]`` on every rank ``r``; ``local=None`` is in place: rank ``r``'s
        input is its own block of ``out``.

        >>> ring = DeviceRingCollectives(2, slot_elems=4)
        >>> everyone = np.array([[1, 2, 0, 0], [0, 0, 3, 4]])
        >>> ring.all_gather(None, everyone).tolist()
        [[1, 2, 3, 4], [1, 2, 3, 4]]
        """
        self._run("all_gather", out if local is None else local, out).copy_to_host(out)
        return out

    def reduce_scatter(self, local: np.ndarray, out: np.ndarray | None = None, op: str = "sum") -> np.ndarray:
        """``out[r] = op over ranks of local[:, r*count:(r+1)*count]``; ``out=None`` is in place: rank ``r``'s
        result lands in its own block of ``local``.

        >>> ring = DeviceRingCollectives(2, slot_elems=4)
        >>> ring.reduce_scatter(np.array([[1, 2], [10, 20]]), np.zeros((2, 1), np.int64)).tolist()
        [[11], [22]]
        """
        out = local if out is None else out
        self._run("reduce_scatter", local, out, op).copy_to_host(out)
        return out

    def broadcast(self, src: np.ndarray, out: np.ndarray | None = None, root: int = 0) -> np.ndarray:
        """``out[r] = src[root]`` on every rank (``src`` is read on the root only); ``out=None`` is in place.

        >>> DeviceRingCollectives(3, slot_elems=4).broadcast(np.eye(3), root=2)[0].tolist()
        [0.0, 0.0, 1.0]
        """
        out = src if out is None else out
        self._run("broadcast", src, out, root=root).copy_to_host(out)
        return out

    def reduce(self, local: np.ndarray, out: np.ndarray | None = None, op: str = "sum", root: int = 0) -> np.ndarray:
        """``out[root] = op over ranks of local``; as the host's reduce, no other rank's row of ``out`` is written.
        ``out=None`` is in place.

        >>> ring = DeviceRingCollectives(3, slot_elems=4)
        >>> ring.reduce(np.arange(6).reshape(3, 2), root=1).tolist()     # rows 0 and 2 are untouched
        [[0, 1], [6, 9], [4, 5]]
        """
        out = local if out is None else out
        out[root] = self._run("reduce", local, out, op, root)[root].copy_to_host()
        return out
