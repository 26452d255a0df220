"""The cost model that picks an algorithm, NCCL-style: ``time = steps x latency + bytes / bandwidth``.

Every step of an algorithm waits for a peer and moves one chunk, so it costs a latency ``alpha`` (the
hand-over through the FIFO, a kernel launch, a poll) plus the chunk's bytes at the link's bandwidth ``beta``.
For each collective and algorithm, :func:`cost_terms` counts, for one rank on the critical path, the steps and
the bytes it sends::

    ring all-reduce          2(n-1) steps per round of n chunks;  2(n-1)/n x S bytes
    tree all-reduce          2 log2(n) steps + one per chunk;     about 2 S bytes through an inner node
    direct all-reduce        2 steps per chunk;                   (n-1) x S bytes
    halving-doubling         2 log2(n) exchanges;                 2(n-1)/n x S bytes

The estimate is ``steps x alpha + bytes / beta`` with the parameters of the slowest transport used anywhere in
the communicator (:func:`slowest`). ``python -m nbcoll calibrate`` measures ``alpha`` and ``beta`` per transport
with a ping-pong and stores them per machine and backend; without a calibration the defaults below apply.

Every rank must pick the same algorithm, or their steps do not match and the collective hangs. So the choice
depends only on what every rank knows alike: the topology, and rank 0's calibration, which the communicator
hands to every rank when it is created (another machine may hold other calibrations, or none).

Example::

    comm.estimate("all_reduce", 1 << 20)                 # seconds, with the algorithm the tuner would pick
    comm.estimate("all_reduce", 1 << 20, algo="tree")
"""

from __future__ import annotations

import json
import math
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from nbcoll import backend
from nbcoll.comm.config import CommConfig

DEFAULTS = {
    # backend -> transport -> (alpha seconds per step, beta bytes per second), measured on a 2-core CPU machine.
    "numpy": {"ipc": (40e-6, 2.0e9), "mpi": (60e-6, 1.0e9)},
    "sim": {"ipc": (8e-3, 2.0e6), "mpi": (8e-3, 2.0e6)},
    "cuda": {"ipc": (20e-6, 50e9), "mpi": (60e-6, 5e9)},
}


@dataclass
class LinkModel:
    """One transport's parameters: seconds per step and bytes per second."""

    alpha: float
    beta: float


def calibration_file(config: CommConfig | None = None) -> Path:
    """Where calibrations are stored: ``NBCOLL_TUNER_FILE``, or a file per user under ``~/.cache/nbcoll``."""
    override = (config or CommConfig.from_env()).tuner_file
    return Path(override) if override else Path.home() / ".cache" / "nbcoll" / "tuner.json"


def _key() -> str:
    return f"{socket.gethostname()}/{backend.get_backend()}"


def default_models(backend_name: str) -> dict[str, LinkModel]:
    """The uncalibrated models of a backend: the same on every machine."""
    return {t: LinkModel(*p) for t, p in DEFAULTS[backend_name].items()}


def load_models(config: CommConfig | None = None) -> dict[str, LinkModel]:
    """The calibrated models of this machine and backend, or the defaults."""
    models = default_models(backend.get_backend())
    path = calibration_file(config)
    if path.exists():
        try:
            stored = json.loads(path.read_text()).get(_key(), {})
        except (OSError, ValueError):
            stored = {}
        for transport, params in stored.items():
            models[transport] = LinkModel(**params)
    return models


def save_models(models: dict[str, LinkModel]) -> Path:
    """Store calibrated models for this machine and backend; returns the file."""
    path = calibration_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[_key()] = {t: asdict(m) for t, m in models.items()}
    path.write_text(json.dumps(data, indent=2))
    return path


def slowest(models: dict[str, LinkModel], transports: set[str]) -> LinkModel:
    """One model for links of several transports: the largest ``alpha`` and the smallest ``beta`` among them.

    A collective is as slow as its slowest link, and one transport may have the longer latency while the other
    has the lower bandwidth; taking the worst of each keeps the result independent of which is which.
    """
    used = [models[t] for t in sorted(transports)]
    return LinkModel(alpha=max(m.alpha for m in used), beta=min(m.beta for m in used))


def fit(sizes: list[int], seconds: list[float]) -> LinkModel:
    """Least-squares fit of ``seconds = alpha + bytes / beta`` to a ping-pong's one-way times."""
    n = len(sizes)
    mean_x, mean_y = sum(sizes) / n, sum(seconds) / n
    sxx = sum((x - mean_x) ** 2 for x in sizes)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, seconds, strict=True))
    slope = sxy / sxx if sxx else 0.0
    if slope <= 0:  # noise hid the size dependence: fall back to the largest transfer's average rate
        largest = max(range(n), key=lambda i: sizes[i])
        alpha = min(seconds)
        return LinkModel(alpha=alpha, beta=sizes[largest] / max(seconds[largest], 1e-9))
    alpha = max(mean_y - slope * mean_x, 1e-7)
    return LinkModel(alpha=alpha, beta=1.0 / slope)


def cost_terms(collective: str, algo: str, nbytes: int, nranks: int, chunk_bytes: int) -> tuple[float, float]:
    """``(steps, bytes)`` on the critical path of one rank, for a buffer of ``nbytes`` (per rank where the
    collective has one block per rank: all-gather's input, reduce-scatter's output, all-to-all's total / n)."""
    n, s = nranks, float(nbytes)
    if n == 1:
        return 1.0, 0.0
    chunks = max(1, math.ceil(s / chunk_bytes))
    depth = max(1, math.floor(math.log2(n)))
    if collective == "all_reduce":
        if algo == "ring":
            rounds = max(1, math.ceil(s / (n * chunk_bytes)))
            return 2 * (n - 1) * rounds, 2 * (n - 1) / n * s
        if algo == "tree":
            return 2 * (2 * depth + chunks), 2 * s
        if algo == "direct":
            return 2 * chunks, (n - 1) * s
        if algo == "halving_doubling":
            p = 1 << (n.bit_length() - 1)
            extra_steps, extra_bytes = (2 * chunks, 2 * s) if p != n else (0, 0.0)
            per_round = sum(max(1, math.ceil(s / (2**k) / chunk_bytes)) for k in range(1, int(math.log2(p)) + 1))
            return 2 * per_round + extra_steps, 2 * (p - 1) / p * s + extra_bytes
    if collective in ("broadcast", "reduce"):
        if algo == "ring":
            return n - 1 + chunks - 1, s
        if algo == "tree":
            return depth + chunks - 1, 2 * s
    if collective in ("all_gather", "reduce_scatter"):
        if algo == "ring":
            return (n - 1) * chunks, (n - 1) * s
        if algo == "direct":
            return n * chunks, (n - 1) * s
    if collective == "all_to_all":
        return (n - 1) * chunks * 2, (n - 1) * s
    if collective in ("gather", "scatter"):
        return (n - 1) * chunks, (n - 1) * s
    if collective == "barrier":
        return 2 * math.ceil(math.log2(n)), 0.0
    raise ValueError(f"algo: no cost model for {collective} with {algo!r}")


def estimate(collective: str, algo: str, nbytes: int, nranks: int, chunk_bytes: int, model: LinkModel) -> float:
    """Predicted seconds: ``steps x alpha + bytes / beta``."""
    steps, moved = cost_terms(collective, algo, nbytes, nranks, chunk_bytes)
    return steps * model.alpha + moved / model.beta


def choose(collective: str, allowed: list[str], nbytes: int, nranks: int, chunk_bytes: int, model: LinkModel) -> str:
    """The allowed algorithm with the lowest estimate (ties go to the earlier one in ``allowed``)."""
    return min(allowed, key=lambda a: estimate(collective, a, nbytes, nranks, chunk_bytes, model))
