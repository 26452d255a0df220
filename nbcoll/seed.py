"""One seed for everything random that nbcoll draws: parameter initialisation and dropout masks.

``manual_seed(s)`` restarts a NumPy generator; initialisers draw their values from it on the host (a model is
initialised once, so the host is the simple place), and each dropout call draws from it the seed of its
counter-based mask (see ``nbcoll.kernels.random``), which every backend turns into the same mask. The same seed
and the same sequence of calls give the same parameters and the same masks on ``cuda``, ``sim`` and ``numpy``.
Each rank of a loopback world (:mod:`nbcoll.comm.loopback`), a thread, draws from a generator of its own, as each
process of an MPI job does: a copy of its caller's (:func:`snapshot`, :func:`rank_state`).

Example::

    >>> import numpy as np, nbcoll
    >>> nbcoll.manual_seed(0)
    >>> a = nbcoll.nn.Linear(3, 2).weight.numpy()
    >>> nbcoll.manual_seed(0)
    >>> b = nbcoll.nn.Linear(3, 2).weight.numpy()
    >>> np.array_equal(a, b)
    True
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator

import numpy as np

DEFAULT_SEED = 0
"""The seed in force until ``manual_seed`` is called: runs are reproducible by default."""

_lock = threading.Lock()  # a data loader's background thread may build tensors while the main thread draws
_process_state = {"seed": DEFAULT_SEED, "generator": np.random.default_rng(DEFAULT_SEED)}
# The ranks of a loopback world are threads of one process, but each must draw as a process of its own does
# under mpiexec: such a thread holds its own state here (see rank_state); every other thread uses the process's.
_thread = threading.local()


def _state() -> dict:
    return getattr(_thread, "state", None) or _process_state


def manual_seed(seed: int) -> None:
    """Restart the generator behind initialisation and dropout from ``seed`` (an int in [0, 2**63)).

    >>> import nbcoll
    >>> nbcoll.manual_seed(7)
    >>> a = nbcoll.nn.Linear(2, 2).weight.numpy()
    >>> nbcoll.manual_seed(7)
    >>> bool((nbcoll.nn.Linear(2, 2).weight.numpy() == a).all())      # the same seed, the same weights
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ValueError(f"seed: expected an int in [0, 2**63), got {seed!r}")
    with _lock:
        state = _state()
        state["seed"] = int(seed)
        state["generator"] = np.random.default_rng(int(seed))


def initial_seed() -> int:
    """The seed given to the last ``manual_seed`` (``DEFAULT_SEED`` before any).

    >>> import nbcoll
    >>> nbcoll.manual_seed(42)
    >>> nbcoll.initial_seed()
    42
    """
    return _state()["seed"]


def host_generator() -> np.random.Generator:
    """The NumPy generator that initialisers draw from (shared: each draw moves it on)."""
    return _state()["generator"]


def next_seed() -> int:
    """A fresh 63-bit seed drawn from the generator, for one counter-based random kernel launch."""
    with _lock:
        return int(_state()["generator"].integers(0, 2**63))


def snapshot() -> dict:
    """A copy of the calling thread's generator state, to start other threads from (:func:`rank_state`).

    >>> import nbcoll
    >>> from nbcoll import seed
    >>> nbcoll.manual_seed(3)
    >>> state = seed.snapshot()
    >>> a = seed.next_seed()
    >>> with seed.rank_state(state):
    ...     b = seed.next_seed()           # the same draw, from the copy
    >>> a == b, seed.next_seed() != a      # and the caller's generator moved on only once
    (True, True)
    """
    with _lock:
        return copy.deepcopy(_state())


@contextlib.contextmanager
def rank_state(state: dict) -> Iterator[None]:
    """Let the calling thread draw from a copy of ``state`` (from :func:`snapshot`) until the block ends.

    A loopback world runs each rank in such a block, so ``manual_seed`` and every draw on a rank touch that rank's
    generator alone, as they touch one process's under ``mpiexec``.

    >>> import nbcoll
    >>> from nbcoll import seed
    >>> nbcoll.manual_seed(1)
    >>> with seed.rank_state(seed.snapshot()):
    ...     nbcoll.manual_seed(2)
    >>> nbcoll.initial_seed()              # the block's seed stayed in the block
    1
    """
    previous = getattr(_thread, "state", None)
    _thread.state = copy.deepcopy(state)
    try:
        yield
    finally:
        _thread.state = previous


__all__ = ["DEFAULT_SEED", "host_generator", "initial_seed", "manual_seed", "next_seed", "rank_state", "snapshot"]
