"""``all_reduce(proto="device")``: the ring all-reduce as one kernel per rank, which the host only launches.

The host-driven path (:mod:`nbcoll.comm.algorithms.ring`) launches a kernel and polls from Python for every chunk.
Here each rank's process launches :func:`~nbcoll.comm.algorithms.ring_device_rank.ring_rank_all_reduce_kernel`
once, and its threads spin on the head and tail counters its neighbours write, as NCCL's kernels do:

* **set-up**, collective, at the first device all-reduce of each dtype: every rank creates its incoming FIFOs
  (and, the first time, its counters), and the direct windows' machinery (``DirectWindows._map_everywhere``)
  maps them on every peer and unlinks the names once all have. Each rank keeps its own and its next rank's.
* **abort**: the launching thread is inside the kernel, so a watch thread (:class:`KernelWatch`) sets the
  kernel's abort word when ``NBCOLL_TIMEOUT`` passes without a counter moving, a peer's process is gone, or the
  communicator is aborted; the kernel returns a status, and :func:`failure` turns it into the usual error.
* **selection**: ``proto="device"`` asks for it (a request it cannot serve is a ``ValueError``), and
  ``NBCOLL_PROTO=device`` makes it the default of every call it can serve (the others stay on the host); the
  all-gather, reduce-scatter, broadcast and reduce take it too (:mod:`nbcoll.comm.device_ring_calls`).
  Where the ranks cannot spin on each other at all (threads of one process, peers off this machine, two ranks on
  one GPU without MPS) it falls back to the host-driven ring with a one-line warning, never a hang.

Example (under ``mpiexec -n 2``, each rank)::

    comm = nbcoll.init()
    comm.all_reduce(x, algo="ring", proto="device")      # one kernel launch on each rank
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nbcoll import backend
from nbcoll.comm.algorithms.ring_device import DTYPES
from nbcoll.comm.config import PROTOS
from nbcoll.comm.device import prims as dp
from nbcoll.comm.errors import CommAbortedError, CommError, CommPeerLostError, CommTimeoutError
from nbcoll.comm.watchdog import HEALTH_CHECK_INTERVAL, process_alive
from nbcoll.kernels import combine as combine_kernels

MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
"""Where the MPS control daemon puts its pipes unless ``CUDA_MPS_PIPE_DIRECTORY`` says otherwise."""


def check_proto(proto: Any) -> str:
    """``proto`` checked: ``"host"`` (chunks steered from Python) or ``"device"`` (one kernel per rank).

    >>> check_proto("device")
    'device'
    >>> check_proto("ll")
    Traceback (most recent call last):
        ...
    ValueError: proto: expected one of host, device, got 'll'
    """
    if proto not in PROTOS:
        raise ValueError(f"proto: expected one of {', '.join(PROTOS)}, got {proto!r}")
    return proto


def unsupported(op: Any, algo: str | None, dtype: Any, asynchronous: bool, collective: str = "all_reduce") -> str:
    """Why the device ``collective`` cannot serve a call, naming the argument; ``""`` when it can (``op=None``:
    one that does not reduce).

    >>> unsupported("sum", "ring", np.float32, False)
    ''
    >>> unsupported("avg", None, np.float32, False)
    "op: proto='device' reduces with sum, prod, max or min, got 'avg'"
    >>> unsupported(None, "tree", np.float32, False, "broadcast")
    "algo: proto='device' runs the ring broadcast only, got 'tree'"
    """
    name = None if op is None else combine_kernels.parse_op(op)
    if op is not None and (not isinstance(name, str) or name not in dp.OPS):
        return f"op: proto='device' reduces with sum, prod, max or min, got {name!r}"
    if algo not in (None, "ring"):
        return f"algo: proto='device' runs the ring {collective.replace('_', '-')} only, got {algo!r}"
    if dtype is None or np.dtype(dtype) not in [np.dtype(t) for t in DTYPES]:
        return f"sendbuf.dtype: proto='device' takes float32, float64, int32 or int64, got {dtype}"
    if asynchronous:
        return "async_op: proto='device' runs one blocking kernel per call, not async or inside comm.group()"
    return ""


def mps_visible(env: Mapping[str, str] | None = None, is_dir: Callable[[str], bool] = os.path.isdir) -> bool:
    """Whether CUDA's Multi-Process Service is there to run kernels of several processes on one GPU at once.

    >>> mps_visible({"CUDA_MPS_PIPE_DIRECTORY": "/run/mps"}), mps_visible({}, is_dir=lambda path: False)
    (True, False)
    """
    env = os.environ if env is None else env
    return bool(env.get("CUDA_MPS_PIPE_DIRECTORY", "").strip()) or is_dir(MPS_PIPE_DIRECTORY)


def shared_gpu_problem(gpus: Sequence[Any], mps: bool) -> str:
    """Why spinning kernels could hang here: two ranks of the machine on one GPU without MPS (``""`` if none).

    Without MPS the kernels of two processes on one GPU take turns: one spinning on the other never ends.

    >>> shared_gpu_problem(["GPU-a", "GPU-b"], mps=False)
    ''
    >>> shared_gpu_problem(["GPU-a", "GPU-a"], mps=False)
    'ranks 0 and 1 share GPU GPU-a without MPS (their kernels would take turns, and a spinning one never ends)'
    >>> shared_gpu_problem(["GPU-a", "GPU-a"], mps=True)
    ''
    """
    first: dict[Any, int] = {}
    for rank, gpu in enumerate(gpus):
        if gpu in first and not mps:
            return (
                f"ranks {first[gpu]} and {rank} share GPU {gpu} without MPS (their kernels would take turns, and a "
                "spinning one never ends)"
            )
        first.setdefault(gpu, rank)
    return ""


def world_problem(comm: Any) -> str:
    """Why this communicator's ranks cannot run one spinning kernel each (``""`` when they can); local, alike on
    every rank except the GPU check, which :class:`DeviceAllReduce` makes collectively.

    >>> import nbcoll
    >>> comm = nbcoll.init()
    >>> world_problem(comm)                          # one rank: the kernel only copies
    ''
    >>> comm.destroy()
    """
    if comm.size == 1:
        return ""
    if getattr(comm._wiring.ctrl, "buffer_kind", None) is not None:
        return "the ranks are threads of one process, whose kernels would not run side by side"
    if backend.get_backend() == "numpy" and not backend.is_simulator():
        return "the numpy backend's buffers are host memory, which this process's GPU kernels do not read"
    if any(comm.transport_to(p) != "ipc" for p in range(comm.size) if p != comm.rank):
        return "some peers are on another node, whose memory no kernel here can map"
    return ""


IDLE_CHECK_INTERVAL = 1.0
"""Seconds between two looks of an idle :class:`KernelWatch` at whether its communicator has ended."""


class KernelWatch:
    """The host's watchdog of one communicator's kernels: one standing thread that, while the launching thread is
    blocked inside a kernel, sets ``abort[0]`` and says why.

    ``with watch:`` (or ``with watch.launch(progress):``) watches one launch; the thread starts at the first and
    serves every later one, so a launch pays no thread start. ``progress()`` is a number that grows while the
    kernel moves (its counters), or ``None`` where the host cannot read them while a kernel runs (a GPU): then the
    timeout counts from the launch. Between launches the thread only looks, every :data:`IDLE_CHECK_INTERVAL`,
    whether ``ended()`` (the communicator was aborted or destroyed), and then ends; :meth:`stop` ends it at once.

    >>> abort = np.zeros(1, np.int32)
    >>> watch = KernelWatch(abort, timeout=0.05, progress=lambda: 0, aborted_by=lambda: None, peer_pids={})
    >>> with watch:
    ...     time.sleep(0.3)                      # a kernel that never moves
    >>> watch.reason, int(abort[0])
    (('timeout', None), 1)
    >>> watch.stop(); watch.alive
    False
    """

    def __init__(self, abort: Any, timeout: float, progress: Callable[[], int | None],
                 aborted_by: Callable[[], int | None], peer_pids: Mapping[int, int],
                 ended: Callable[[], bool] = lambda: False) -> None:  # fmt: skip
        self.abort, self.timeout, self.progress = abort, timeout, progress
        self.aborted_by, self.peer_pids, self.ended = aborted_by, peer_pids, ended
        self.reason: tuple[str, int | None] | None = None
        # Held by every check: a launch that ends waits for a check under way, so none fires after it.
        self._state = threading.Condition()
        self._armed = self._stopping = self._running = False  # _running: a thread serves launches (under _state)
        self._seen: int | None = None
        self._since = self._last_move = 0.0
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        """Whether the watch's thread is running (between launches too).

        >>> KernelWatch(np.zeros(1, np.int32), 1.0, lambda: 0, lambda: None, {}).alive      # not before a launch
        False
        """
        return self._thread is not None and self._thread.is_alive()

    def launch(self, progress: Callable[[], int | None]) -> KernelWatch:
        """This watch, to enter around the next launch, whose counters ``progress()`` reads.

        >>> watch = KernelWatch(np.zeros(1, np.int32), 1.0, lambda: 0, lambda: None, {})
        >>> with watch.launch(lambda: None):
        ...     pass
        >>> watch.reason is None
        True
        >>> watch.stop()
        """
        self.progress = progress
        return self

    def __enter__(self) -> KernelWatch:
        with self._state:
            self.reason, self._armed = None, True
            self._seen, self._since = self.progress(), time.monotonic()
            self._last_move = self._since
            if not self._running:
                self._stopping, self._running = False, True
                self._thread = threading.Thread(target=self._watch, name="nbcoll-device-watch", daemon=True)
                self._thread.start()
            self._state.notify()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        with self._state:
            self._armed = False

    def stop(self) -> None:
        """End the thread (a communicator's destroy does); a later launch starts a new one.

        >>> KernelWatch(np.zeros(1, np.int32), 1.0, lambda: 0, lambda: None, {}).stop()       # never started
        """
        with self._state:
            self._stopping = True
            self._state.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _watch(self) -> None:
        with self._state:
            while not self._stopping and (self._armed or not self.ended()):
                if not self._armed or self.reason is not None:  # idle, or this launch is stopped: until it returns
                    self._state.wait(IDLE_CHECK_INTERVAL)
                    continue
                self._state.wait(HEALTH_CHECK_INTERVAL)
                if self._armed and self.reason is None and time.monotonic() - self._since >= HEALTH_CHECK_INTERVAL:
                    self._check()
            self._running = False  # under the lock: the next launch starts a thread of its own

    def _check(self) -> None:
        now, moved = time.monotonic(), self.progress()
        if moved != self._seen:
            self._seen, self._last_move = moved, now
            return
        by = self.aborted_by()
        dead = [p for p, pid in sorted(self.peer_pids.items()) if not process_alive(pid)]
        if by is not None:
            self.reason = ("aborted", by)
        elif dead:  # and nothing moved since the last look: what it wrote last has been read
            self.reason = ("lost", dead[0])
        elif now - self._last_move > self.timeout:
            self.reason = ("timeout", None)
        if self.reason is not None:
            self.abort[0] = 1


def failure(status: np.ndarray, reason: tuple[str, int | None] | None, *, rank: int, nranks: int, call: str,
            timeout: float, pids: Mapping[int, int]) -> CommError | None:  # fmt: skip
    """The error of a launch whose ``status[channel] = (code, steps started)`` is not all OK, or ``None``.

    >>> status = np.array([[dp.ABORTED_RECV, 2]])
    >>> print(failure(status, ("timeout", None), rank=1, nranks=3, call="all_reduce #4 (ring, device)",
    ...               timeout=5.0, pids={}))
    rank 1: all_reduce #4 (ring, device) made no progress for 5 s (NBCOLL_TIMEOUT): channel 0 waited for the chunk \
of its previous rank (rank 0) at step 2
    """
    prev, nxt = (rank - 1) % nranks, (rank + 1) % nranks
    where = {dp.ABORTED_RECV: f"waited for the chunk of its previous rank (rank {prev})",
             dp.ABORTED_SEND: f"waited for a free slot of its next rank (rank {nxt})",
             dp.RUNNING: "never ran"}  # fmt: skip
    stopped = [f"channel {c} {where.get(int(code), f'ended with code {int(code)}')}"
               + (f" at step {int(step)}" if code > 0 else "")
               for c, (code, step) in enumerate(status) if code != dp.OK]  # fmt: skip
    if not stopped:
        return None
    what, who = reason if reason is not None else ("aborted", None)
    detail = "; ".join(stopped)
    if what == "lost":
        return CommPeerLostError(f"rank {rank}: {call} failed: peer rank {who} (pid {pids.get(who)}) has exited: "
                                 + detail)  # fmt: skip
    if what == "timeout":
        return CommTimeoutError(f"rank {rank}: {call} made no progress for {timeout:g} s (NBCOLL_TIMEOUT): " + detail)
    by = "this rank" if who == rank else f"rank {who}"
    return CommAbortedError(f"rank {rank}: {call} stopped: the communicator was aborted by {by}: " + detail)
