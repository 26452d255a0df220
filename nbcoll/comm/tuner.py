"""The cost model that picks an algorithm, NCCL-style: ``time = gamma + steps x alpha + bytes / beta``.

A collective call costs a fixed ``gamma`` (the Python that checks its arguments, plans its steps and starts the
progress loop: NCCL's base latency), or ``gamma_replay`` for a one-shot call whose plan the engine keeps and
replays when it is made again on the same buffers (:mod:`nbcoll.comm.replay`: the checks and the plan are gone,
which is what a training loop or a benchmark pays on every call after the first); every step that waits for a
peer costs a latency ``alpha`` (the hand-over through the FIFO or window, a kernel launch, a poll); and every
byte the busiest rank copies or folds costs ``1 / beta``. Bytes are counted where the time goes: a chunk sent
through a FIFO is copied into the slot by its sender and out of it by its receiver, a fold reads two operands and
writes one, so ``beta`` is the rate of the copy and combine kernels as much as of the link. For each collective
and algorithm, :func:`cost_terms` counts, for the busiest rank, the steps it waits through and the bytes it
copies or folds (buffer of ``S`` bytes, ``n`` ranks, chunks of ``c`` bytes, windows of ``w``)::

    ring all-reduce      (2n-1) steps per round of n chunks;           (3n-2)/n x S   (copy in, fold, copy out)
    tree all-reduce      4 (S/2c + log2 n) steps (two trees, up, down);  2 S (n = 2) to 3.5 S (inner nodes)
                         half as many on two channels (the trees at once)
    direct all-reduce    1 + 1 step per piece p (over IPC),              n x S        (post, fold n sources)
                         or 2 per chunk through FIFOs;                   2(n-1) x S
    halving-doubling     S/c for the first copy, 4 per chunk of each of the log2 p exchanges;  S + 4(p-1)/p x S
    direct broadcast     1 + 1 step per piece p;                         S + p        (stage and read overlap)
    direct all-to-all    1 + 1 step per piece p of each of n blocks;     2(n-1) x S
    direct reduce-scatter  1 + 1 step per piece p of each of n blocks;   n x S        (stage, fold n sources)

A direct algorithm over IPC cuts a message (per block) into pieces of ``p`` = 1 MiB (a reduce-scatter's at most
2 MiB over its n blocks), or half the window per block if less
(:func:`nbcoll.comm.protocol_direct.piece_elems`): its rounds take the window's two halves in turn, so a rank
stages one piece while its peers read the last. So the first round waits
twice (for the peers to be done reading, then for their posts), and each later round once: its post waits only
for the round before last, long done. Only a broadcast's root has nothing else to do meanwhile; elsewhere every
rank both stages and reads, and the bytes of the busiest rank stay.

Direct counts bytes as staged through the windows: whether a buffer is registered (read in place, one copy
fewer) is known to its own rank only, and every rank must choose alike; registration only makes direct faster.

Channels (``NBCOLL_NCHANNELS``): the double binary tree's two trees run at once on two channels, so their waits
overlap and the busiest rank waits through half the steps; that is what lets a tree beat a ring on small messages
from 4 ranks on. A ring split across channels runs about as many steps in all, each channel half of them, and
its model does not change.

The estimate uses the parameters of the slowest transport used anywhere in the communicator (:func:`slowest`).
``python -m nbcoll calibrate`` times the collectives themselves per transport and fits ``gamma``, ``alpha`` and
``beta`` to those times by least squares (:func:`fit`), storing them per machine and backend; without a
calibration the defaults below apply (fitted the same way on a 2-core CPU machine).

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

import numpy as np

from nbcoll import backend
from nbcoll.comm.algorithms import direct
from nbcoll.comm.config import CommConfig

DEFAULTS = {
    # backend -> transport -> (alpha seconds per step, beta bytes per second, gamma seconds per call, and
    # gamma_replay seconds per replayed call, the same as gamma when left out). numpy's ipc: fitted to six 2-rank
    # runs of benchmarks/model_fit.py on a 2-core machine, three in each of its phases (benchmarks/lab/NOTES.md,
    # "The cost model", has what model_fit.py --fit printed for them and for two later runs the fit did not see);
    # numpy's mpi: one calibration on that machine; the rest set by hand.
    "numpy": {"ipc": (17e-6, 21.3e9, 21e-6, 1.5e-6), "mpi": (20e-6, 8.0e9, 30e-6)},
    "sim": {"ipc": (8e-3, 2.0e6, 20e-3, 10e-3), "mpi": (8e-3, 2.0e6, 20e-3)},
    "cuda": {"ipc": (20e-6, 50e9, 100e-6, 50e-6), "mpi": (60e-6, 5e9, 100e-6)},
}


@dataclass
class LinkModel:
    """One transport's parameters: seconds per step, bytes per second, seconds per call (and per replayed call:
    ``None`` is the same as ``gamma``).

    ``window_bytes`` is the size of the windows the direct algorithms read their peers through when every link
    is ipc (0: they go through FIFOs), ``ll_bytes`` the largest message they send with the LL protocol there
    (:mod:`nbcoll.comm.ll`), and ``channels`` the connection sets per pair of ranks; the communicator sets all
    three.
    """

    alpha: float
    beta: float
    gamma: float = 0.0
    gamma_replay: float | None = None
    window_bytes: int = 0
    channels: int = 1
    ll_bytes: int = 0


def calibration_file(config: CommConfig | None = None) -> Path:
    """Where calibrations are stored: ``NBCOLL_TUNER_FILE``, or a file per user under ``~/.cache/nbcoll``."""
    override = (config or CommConfig.from_env()).tuner_file
    return Path(override) if override else Path.home() / ".cache" / "nbcoll" / "tuner.json"


def _key() -> str:
    return f"{socket.gethostname()}/{backend.get_backend()}"


def default_models(backend_name: str) -> dict[str, LinkModel]:
    """The uncalibrated models of a backend: the same on every machine."""
    return {t: LinkModel(*p) for t, p in DEFAULTS[backend_name].items()}


_STORED = ("alpha", "beta", "gamma", "gamma_replay")
"""The fields a calibration stores (a file written before ``gamma`` existed keeps the default's)."""


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
            base = asdict(models.get(transport, LinkModel(0.0, 1.0)))
            models[transport] = LinkModel(**{**base, **{k: v for k, v in params.items() if k in _STORED}})
    return models


def save_models(models: dict[str, LinkModel]) -> Path:
    """Store calibrated models for this machine and backend; returns the file."""
    path = calibration_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[_key()] = {t: {k: getattr(m, k) for k in _STORED} for t, m in models.items()}
    path.write_text(json.dumps(data, indent=2))
    return path


def slowest(models: dict[str, LinkModel], transports: set[str]) -> LinkModel:
    """One model for links of several transports: the largest ``alpha`` and ``gamma``, the smallest ``beta``.

    A collective is as slow as its slowest link, and one transport may have the longer latency while the other
    has the lower bandwidth; taking the worst of each keeps the result independent of which is which.
    """
    used = [models[t] for t in sorted(transports)]
    replays = [m.gamma if m.gamma_replay is None else m.gamma_replay for m in used]
    return LinkModel(
        alpha=max(m.alpha for m in used),
        beta=min(m.beta for m in used),
        gamma=max(m.gamma for m in used),
        gamma_replay=max(replays),
    )


def fit(steps: list[float], moved: list[float], seconds: list[float], replayed: list[bool] | None = None) -> LinkModel:
    """Fit ``seconds = gamma + steps x alpha + moved / beta`` to measured collectives, in relative terms; with
    ``replayed`` (which cases were replayed calls), ``gamma_replay`` in their ``gamma``'s place.

    It minimizes ``sum(log(predicted / measured) ** 2)``: an estimate twice too high costs as much as one twice
    too low, and a 100 us call counts as much as a 10 ms one. A linear least-squares fit weighted by
    ``1 / seconds`` starts it; Gauss-Newton steps refine it. A parameter is never below its floor (no call or
    step costs less than nothing, no copy is infinitely fast).
    """
    y = np.asarray(seconds, dtype=np.float64)
    again = np.asarray(replayed if replayed is not None else [False] * len(y), dtype=np.float64)
    both = 0 < again.sum() < len(y)  # a separate gamma_replay only when both kinds of call were measured
    calls = [1.0 - again, again] if both else [np.ones_like(y)]
    x = np.stack([*calls, np.asarray(steps, float), np.asarray(moved, float)], axis=1)
    floors = np.array([0.0] * len(calls) + [1e-7, 1e-12])  # gamma(s), alpha, 1 / beta
    theta = np.maximum(np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)[0], floors)

    def cost(t: np.ndarray) -> float:
        return float(np.sum(np.log(x @ t / y) ** 2))

    for _ in range(50):
        predicted = x @ theta
        step = np.linalg.lstsq(x / predicted[:, None], -np.log(predicted / y), rcond=None)[0]
        scale, before = 1.0, cost(theta)
        while scale > 1e-4 and cost(np.maximum(theta + scale * step, floors)) >= before:
            scale /= 2
        if scale <= 1e-4:
            break
        theta = np.maximum(theta + scale * step, floors)
    *gammas, alpha, inv_beta = (float(v) for v in theta)
    return LinkModel(alpha=alpha, beta=1.0 / inv_beta, gamma=gammas[0], gamma_replay=gammas[-1] if both else None)


def _chunks(nbytes: float, chunk_bytes: float) -> int:
    return max(1, math.ceil(nbytes / chunk_bytes))


def _piece(window_bytes: int, blocks: int = 1, piece_bytes: int = direct.PIECE_BYTES) -> float:
    """Bytes per block of a round of a one-shot collective over the windows, cut as the direct algorithms cut."""
    return float(direct.piece_elems(1, window_bytes // blocks, piece_bytes))


def _waits(nbytes: float, piece: float) -> int:
    """The waits of a one-shot collective over the windows: two in its first round (for the peers to be done
    reading, then for their posts) and one in each later round, whose post waits only for the round before last,
    long done."""
    return 1 + _chunks(nbytes, piece)


def cost_terms(
    collective: str,
    algo: str,
    nbytes: int,
    nranks: int,
    chunk_bytes: int,
    window_bytes: int = 0,
    channels: int = 1,
    ll_bytes: int = 0,
) -> tuple[float, float]:
    """``(steps, bytes)`` of the busiest rank: the steps it waits through and the bytes it copies or folds, for a
    buffer of ``nbytes`` (per rank where the collective has one block per rank: all-gather's input,
    reduce-scatter's output, all-to-all's total / n). ``window_bytes`` > 0: direct algorithms use IPC windows;
    up to ``ll_bytes`` they use LL lines (one wait a round, every byte written as two); ``channels`` > 1: the two
    trees of a tree all-reduce run at once."""
    n, s = nranks, float(nbytes)
    if n == 1:
        return 1.0, 0.0
    segments = n if collective in ("all_to_all", "reduce_scatter") else 1
    if algo == "direct" and window_bytes and 0 < s * segments <= ll_bytes:
        if collective == "all_reduce":
            return 1.0, (n + 1) * s
        if collective == "all_gather":
            return 1.0, (n + 2) * s
        if collective in ("all_to_all", "reduce_scatter"):  # every block written as lines, n - 1 of them read
            return 1.0, (3 * n - 1) * s
        if collective == "broadcast":  # a reader reads the root's lines (twice the bytes) and copies the words out
            return 1.0, 3 * s
    chunks = _chunks(s, chunk_bytes)
    depth = max(1, math.floor(math.log2(n)))
    if collective == "all_reduce":
        if algo == "ring":  # per block: send, (n-2) folds on the way, fold + copy, (n-2) copy-throughs, copy out
            rounds = _chunks(s, n * chunk_bytes)
            return (2 * n - 1) * rounds, (3 * n - 2) / n * s
        if algo == "tree":  # an inner node folds two children and sends down to two; n = 2 has no inner node
            at_once = 2 if channels > 1 else 1  # the trees on two channels wait at the same time
            return 4 * (_chunks(s / 2, chunk_bytes) + depth) / at_once, (2.0 if n == 2 else 3.5) * s
        if algo == "direct":  # over the windows: two waits in the first round, one in each later one (_waits)
            if window_bytes:
                return _waits(s, _piece(window_bytes)), n * s
            return 2 * chunks, 2 * (n - 1) * s
        if algo == "halving_doubling":
            p = 1 << (n.bit_length() - 1)
            exchanges = sum(4 * _chunks(s / 2**k, chunk_bytes) for k in range(1, int(math.log2(p)) + 1))
            steps, moved = chunks + exchanges, s + 4 * (p - 1) / p * s
            return (steps + 2 * chunks, moved + 2 * s) if p != n else (steps, moved)
    if collective == "broadcast" and algo == "direct":  # every rank reads the root: one hop
        if window_bytes:  # the root stages piece k + 1 while the readers copy piece k: a pipeline of two copies
            piece = _piece(window_bytes, piece_bytes=direct.broadcast_piece_bytes(n))
            return _waits(s, piece), s + min(s, piece)
        return chunks, n * s  # through FIFOs the root writes a slot for every peer
    if collective in ("broadcast", "reduce"):
        if algo == "ring":
            return chunks + n - 2, 2 * s
        if algo == "tree":
            return chunks + depth - 1, (2.0 if n == 2 else 3.0) * s
    if collective == "reduce_scatter" and algo == "direct" and window_bytes:  # blocks staged for n-1 readers, n folded
        return _waits(s, _piece(window_bytes, n, direct.fold_piece_bytes(n))), n * s
    if collective in ("all_gather", "reduce_scatter"):
        if algo == "ring" or collective == "reduce_scatter":  # a direct reduce-scatter without windows is the ring
            return n * chunks, (2 * n - 1) * s
        if algo == "direct":
            if window_bytes:
                return _waits(s, _piece(window_bytes, piece_bytes=direct.GATHER_PIECE_BYTES)), (n + 1) * s
            return n * chunks, (2 * n - 1) * s
    if collective == "all_to_all":
        if algo == "direct" and window_bytes:  # a round stages one chunk per reader: n chunks fill half the window
            return _waits(s, _piece(window_bytes, n)), 2 * (n - 1) * s
        return 2 * (n - 1) * chunks, 2 * (n - 1) * s
    if collective in ("gather", "scatter"):
        return (n - 1) * chunks, 2 * (n - 1) * s
    if collective == "barrier":
        return 2 * math.ceil(math.log2(n)), 0.0
    raise ValueError(f"algo: no cost model for {collective} with {algo!r}")


ONE_SHOT = ("all_reduce", "all_gather", "broadcast", "all_to_all", "reduce_scatter")
"""The collectives whose direct algorithm runs one-shot rounds when every peer is on ipc: over LL lines when small
(:mod:`nbcoll.comm.ll`), else reading the peers' windows or registered buffers (:mod:`nbcoll.comm.window`)."""


def replayed(collective: str, algo: str, nranks: int, window_bytes: int) -> bool:
    """Whether a call made again on the same buffers is a replay (:mod:`nbcoll.comm.replay`): a direct collective
    that runs over the windows or the LL lines (every peer on ipc: ``window_bytes`` > 0), as the engine plans it."""
    return algo == "direct" and window_bytes > 0 and nranks > 1 and collective in ONE_SHOT


def estimate(collective: str, algo: str, nbytes: int, nranks: int, chunk_bytes: int, model: LinkModel) -> float:
    """Predicted seconds: ``gamma + steps x alpha + bytes / beta`` (``gamma_replay`` for a replayed call)."""
    steps, moved = cost_terms(
        collective, algo, nbytes, nranks, chunk_bytes, model.window_bytes, model.channels, model.ll_bytes
    )
    again = model.gamma_replay is not None and replayed(collective, algo, nranks, model.window_bytes)
    return (model.gamma_replay if again else model.gamma) + steps * model.alpha + moved / model.beta


def choose(collective: str, allowed: list[str], nbytes: int, nranks: int, chunk_bytes: int, model: LinkModel) -> str:
    """The allowed algorithm with the lowest estimate (ties go to the earlier one in ``allowed``)."""
    return min(allowed, key=lambda a: estimate(collective, a, nbytes, nranks, chunk_bytes, model))
