"""Every ``NBCOLL_*`` setting of the communication layer, read and checked in one place.

Example::

    from nbcoll.comm.config import CommConfig
    config = CommConfig.from_env()      # read when a communicator is created
    config.chunk_bytes                  # NBCOLL_BUFFSIZE // NBCOLL_STEPS
    config.nchannels                    # NBCOLL_NCHANNELS connection sets per pair of ranks

============================== ========= ===================================================================
variable                       default   meaning
============================== ========= ===================================================================
``NBCOLL_TIMEOUT``             300       seconds a wait may make no progress before ``CommTimeoutError``
``NBCOLL_BUFFSIZE``            4194304   bytes of one connection's FIFO (NCCL_BUFFSIZE), per channel
``NBCOLL_STEPS``               8         slots of that FIFO (NCCL_STEPS), at least 2; a slot holds one chunk; also the
                                         rounds an LL buffer holds (:mod:`nbcoll.comm.ll`)
``NBCOLL_NCHANNELS``           2         connection sets per pair of ranks (NCCL's channels), 1 to 16
``NBCOLL_TRANSPORT``           (auto)    ``ipc`` or ``mpi`` forces one transport for every peer pair
``NBCOLL_RANKS_PER_NODE``      (real)    pretend that every k consecutive ranks of a machine form a node
``NBCOLL_MPI_CUDA_AWARE``      0         1: hand device pointers to MPI instead of staging through the host
``NBCOLL_DEBUG``               (off)     ``WARN``, ``INFO`` or ``TRACE``
``NBCOLL_DEBUG_SUBSYS``        ALL       comma-separated subsystems: INIT, P2P, IPC, NET, COLL, ...
``NBCOLL_FLIGHT_RECORDER``     32        operations each rank remembers for error messages
``NBCOLL_ALGO``                (all)     the algorithms collectives may use, NCCL_ALGO's syntax (:mod:`.algorithms`)
``NBCOLL_PROTO``               host      ``device``: a ring collective the kernels can serve runs as one kernel per rank
                                         (:mod:`nbcoll.comm.device_collective`); the others stay on the host
``NBCOLL_CHECK``               0         1: compare every collective call's signature across ranks first
``NBCOLL_TRACE``               (off)     a directory: every rank writes one line per step it runs (:mod:`.trace`)
``NBCOLL_TUNER_FILE``          (cache)   the tuner's calibration file (:mod:`.tuner`)
``NBCOLL_LL_BYTES``            65536     largest per-rank message a one-shot collective sends with the LL protocol
                                         (:mod:`nbcoll.comm.ll`); 0 turns LL off; a multiple of 8. On the ``cuda``
                                         backend the default is 0: there each poll is a kernel launch and a copy back,
                                         and small collectives took about half as long on the window path
``NBCOLL_LL_COMPILED``         0         1: on the ``numpy`` backend, an LL step writes and polls through compiled loops
                                         (:mod:`nbcoll.kernels.ll_host`): small collectives cost less, and each process
                                         pays about 0.25 s of Numba start-up at its first LL round
``NBCOLL_CMA_BYTES``           8388608   smallest unregistered input of a direct all-gather, all-to-all or broadcast
                                         that its peers read straight out of its process (``numpy``, ``sim``;
                                         :mod:`nbcoll.comm.transport.cross_memory`); 0 turns it off
``NBCOLL_STREAM_BYTES``        8388608   smallest output of a collective whose chunks the ``numpy`` backend copies into
                                         it with streaming stores, around the caches, on an x86-64 CPU
                                         (:mod:`nbcoll.kernels.stream_copy`); 0 turns it off
``NBCOLL_STREAM_SHARED_BYTES`` 16384     smallest collective whose copies into memory a peer reads next (a piece staged
                                         in a direct window, a chunk in a peer's FIFO slot, LL lines) the ``numpy``
                                         backend makes with streaming stores, on an x86-64 CPU; 0 turns it off
``NBCOLL_FASTPATH``            1         0: every CPU fast path off at once (replay, compiled LL loops, streaming
                                         stores, cross-memory reads: :mod:`nbcoll.comm.fast_paths`); the teaching
                                         path alone, with the same results
============================== ========= ===================================================================

Channels: every pair of ranks is joined by ``NBCOLL_NCHANNELS`` independent connections, each with its own FIFO
of ``NBCOLL_BUFFSIZE`` bytes and its own step counters, so ``NBCOLL_BUFFSIZE`` is per channel, as NCCL_BUFFSIZE
is: the FIFO memory of a rank is ``NBCOLL_NCHANNELS x NBCOLL_BUFFSIZE`` per peer and direction, and a chunk stays
``NBCOLL_BUFFSIZE / NBCOLL_STEPS`` whatever the number of channels (see :mod:`nbcoll.comm.algorithms`). On one
machine, each rank's direct window holds ``NBCOLL_BUFFSIZE`` for every two ranks
(:func:`nbcoll.comm.protocol_direct.window_bytes`).

A communicator reads them once, when it is created; to change one, create a new communicator (or pass a
``CommConfig``). ``split``, ``dup`` and ``shrink`` keep their parent's settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbcoll import backend

TRANSPORTS = ("ipc", "mpi")
PROTOS = ("host", "device")
DEBUG_LEVELS = ("WARN", "INFO", "TRACE")

MAX_CHANNELS = 16
"""Channels a communicator may have: each adds a FIFO per peer and direction, and steps to every large message."""

MIN_STEPS = 2
"""A ring needs two slots per connection: with one, every rank fills its next neighbour's only slot with its
first chunk, then waits for that slot to free up before it takes its previous neighbour's chunk, and so does
every other rank around the ring."""


def _int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name}: must be > 0, got {value}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], upper: bool = False) -> str | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    text = text.upper() if upper else text.lower()
    if text not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, got {text!r}")
    return text


def default_ll_bytes() -> int:
    """``NBCOLL_LL_BYTES``'s default: 64 KiB, or 0 (LL off) on the ``cuda`` backend.

    On a GPU an LL poll is a kernel launch and a copy of the result back to the host, so LL costs more than the
    window path it was meant to shorten: on an H200, 2-rank all-reduces of 8 B to 32 KiB took 1.5-2.7 ms with LL
    and 0.84-1.15 ms without (the Performance page, "On an NVIDIA H200").
    """
    return 0 if backend.get_backend() == "cuda" else 64 << 10


@dataclass(frozen=True)
class CommConfig:
    """The settings one communicator runs with (see the module docstring for each variable).

    >>> from nbcoll.comm import CommConfig
    >>> config = CommConfig(buffsize=1 << 20, steps=4)
    >>> config.chunk_bytes, config.timeout
    (262144, 300.0)
    >>> CommConfig(steps=1)
    Traceback (most recent call last):
        ...
    ValueError: NBCOLL_STEPS: must be >= 2 (a ring deadlocks with a single FIFO slot per connection), got 1
    """

    timeout: float = 300.0
    buffsize: int = 4 << 20
    steps: int = 8
    nchannels: int = 2
    transport: str | None = None
    ranks_per_node: int | None = None
    mpi_cuda_aware: bool = False
    debug: str | None = None
    debug_subsys: frozenset[str] = frozenset({"ALL"})
    flight_recorder: int = 32
    algo: str | None = None
    proto: str | None = None
    check: bool = False
    trace: str | None = None
    tuner_file: str | None = None
    ll_bytes: int = field(default_factory=default_ll_bytes)
    ll_compiled: bool = False
    cma_bytes: int = 8 << 20
    stream_bytes: int = 8 << 20
    stream_shared_bytes: int = 16 << 10
    fastpath: bool = True

    def __post_init__(self) -> None:
        if self.steps < MIN_STEPS:
            raise ValueError(
                f"NBCOLL_STEPS: must be >= {MIN_STEPS} (a ring deadlocks with a single FIFO slot per connection), "
                f"got {self.steps}"
            )
        if not 1 <= self.nchannels <= MAX_CHANNELS:
            raise ValueError(f"NBCOLL_NCHANNELS: must be between 1 and {MAX_CHANNELS}, got {self.nchannels}")
        if self.buffsize % (8 * self.steps):
            raise ValueError(
                f"NBCOLL_BUFFSIZE: must be a multiple of 8 * NBCOLL_STEPS = {8 * self.steps} so that every chunk "
                f"holds whole elements of any dtype, got {self.buffsize}"
            )
        if self.ll_bytes < 0 or self.ll_bytes % 8:
            raise ValueError(f"NBCOLL_LL_BYTES: must be a multiple of 8 and >= 0 (0 turns LL off), got {self.ll_bytes}")
        if self.cma_bytes < 0:
            raise ValueError(f"NBCOLL_CMA_BYTES: must be >= 0 (0 turns cross-memory reads off), got {self.cma_bytes}")
        if self.stream_bytes < 0:
            raise ValueError(f"NBCOLL_STREAM_BYTES: must be >= 0 (0 turns streaming off), got {self.stream_bytes}")
        if self.stream_shared_bytes < 0:
            raise ValueError(
                f"NBCOLL_STREAM_SHARED_BYTES: must be >= 0 (0 turns streaming off), got {self.stream_shared_bytes}"
            )
        if self.proto not in (None, *PROTOS):
            raise ValueError(f"NBCOLL_PROTO: expected one of {', '.join(PROTOS)}, got {self.proto!r}")
        from nbcoll.comm.algorithms import parse_algo_setting  # the setting's syntax lives with the algorithms

        parse_algo_setting(self.algo)  # a bad NBCOLL_ALGO is refused here, when it is read

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one FIFO slot: the unit in which every message is pipelined.

        >>> from nbcoll.comm import CommConfig
        >>> CommConfig().chunk_bytes                     # 4 MiB over 8 slots
        524288
        """
        return self.buffsize // self.steps

    @classmethod
    def teaching(cls, **settings: Any) -> CommConfig:
        """The settings with every fast path off (``NBCOLL_FASTPATH=0``): only the teaching path runs.

        >>> from nbcoll.comm import CommConfig
        >>> config = CommConfig.teaching(nchannels=1)
        >>> config.fastpath, config.nchannels
        (False, 1)
        """
        return cls(**{**settings, "fastpath": False})

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CommConfig:
        """The settings of the ``NBCOLL_*`` variables in ``env`` (default ``os.environ``), each checked.

        >>> from nbcoll.comm import CommConfig
        >>> config = CommConfig.from_env({"NBCOLL_TIMEOUT": "60", "NBCOLL_DEBUG": "info"})
        >>> config.timeout, config.debug, config.steps, config.nchannels
        (60.0, 'INFO', 8, 2)
        """
        env = os.environ if env is None else env
        subsys = env.get("NBCOLL_DEBUG_SUBSYS", "").strip().upper()
        return cls(
            timeout=_float(env, "NBCOLL_TIMEOUT", 300.0),
            buffsize=_int(env, "NBCOLL_BUFFSIZE", 4 << 20, 8),
            steps=_int(env, "NBCOLL_STEPS", 8, MIN_STEPS),
            nchannels=_int(env, "NBCOLL_NCHANNELS", 2, 1),
            transport=_choice(env, "NBCOLL_TRANSPORT", TRANSPORTS),
            ranks_per_node=_int(env, "NBCOLL_RANKS_PER_NODE", 0, 1) or None,
            mpi_cuda_aware=env.get("NBCOLL_MPI_CUDA_AWARE", "0").strip() == "1",
            debug=_choice(env, "NBCOLL_DEBUG", DEBUG_LEVELS, upper=True),
            debug_subsys=frozenset(s.strip() for s in subsys.split(",") if s.strip()) or frozenset({"ALL"}),
            flight_recorder=_int(env, "NBCOLL_FLIGHT_RECORDER", 32, 1),
            algo=env.get("NBCOLL_ALGO", "").strip() or None,
            proto=_choice(env, "NBCOLL_PROTO", PROTOS),
            check=env.get("NBCOLL_CHECK", "0").strip() == "1",
            trace=env.get("NBCOLL_TRACE", "").strip() or None,
            tuner_file=env.get("NBCOLL_TUNER_FILE", "").strip() or None,
            ll_bytes=_int(env, "NBCOLL_LL_BYTES", default_ll_bytes(), 0),
            ll_compiled=env.get("NBCOLL_LL_COMPILED", "0").strip() == "1",
            cma_bytes=_int(env, "NBCOLL_CMA_BYTES", 8 << 20, 0),
            stream_bytes=_int(env, "NBCOLL_STREAM_BYTES", 8 << 20, 0),
            stream_shared_bytes=_int(env, "NBCOLL_STREAM_SHARED_BYTES", 16 << 10, 0),
            fastpath=_int(env, "NBCOLL_FASTPATH", 1, 0) != 0,
        )
