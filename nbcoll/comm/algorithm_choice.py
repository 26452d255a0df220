"""Which algorithm a collective call runs: ``NBCOLL_ALGO``'s allowed set, and the tuner's cheapest among it.

Every input of the choice (the setting, the size, the slowest link of the whole communicator with rank 0's
calibration) is the same on every rank, so every rank chooses the same algorithm, as it must: ranks that ran
different algorithms would hang.

Example::

    choice = AlgorithmChoice(comm)
    choice.choose("all_reduce", 1 << 20)           # "ring", say
    choice.link_model().window_bytes               # 0 unless every peer is on ipc
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nbcoll import backend
from nbcoll.comm import algorithms, tuner
from nbcoll.comm.algorithms import direct


class AlgorithmChoice:
    """A communicator's choice of algorithm per (backend, collective, bytes), and the link model behind it.

    Example::

        choice = AlgorithmChoice(comm)
        algo = choice.choose("broadcast", 64)
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.allowed = algorithms.parse_algo_setting(comm.config.algo)
        self._link_models: dict[str, tuner.LinkModel] = {}
        self._choices: dict[tuple[str, str, int], str] = {}  # (backend, collective, bytes) -> the tuner's choice

    def link_model(self) -> tuner.LinkModel:
        """The slowest link of the whole communicator, with rank 0's calibration: the same on every rank.

        A rank that modelled only its own links would choose differently from a rank with faster ones (ranks
        0-1 sharing a node, rank 2 alone), and the collective would hang with each running another algorithm.
        """
        current = backend.get_backend()
        if current not in self._link_models:
            comm = self.comm
            models = comm._wiring.link_models.get(current) or tuner.default_models(current)
            transports = comm.topology.transports() or {"ipc"}
            on_ipc = transports == {"ipc"}  # direct reads peers in place
            windows = direct.window_bytes(comm.config.buffsize, comm.size) if on_ipc else 0
            ll_bytes = comm.config.ll_bytes if windows else 0
            self._link_models[current] = dataclasses.replace(
                tuner.slowest(models, transports),
                window_bytes=windows,
                channels=comm.config.nchannels,
                ll_bytes=ll_bytes,
            )
        return self._link_models[current]

    def choose(self, collective: str, nbytes: int) -> str:
        """The algorithm ``NBCOLL_ALGO`` allows and the tuner predicts fastest for ``nbytes`` per rank.

        Remembered per size: a training loop asks for the same few sizes on every step, and the answer depends
        only on settings read once.
        """
        key = (backend.get_backend(), collective, nbytes)
        if key not in self._choices:
            self._choices[key] = self._choose(collective, nbytes)
        return self._choices[key]

    def _choose(self, collective: str, nbytes: int) -> str:
        allowed = [a for a in algorithms.ALGORITHMS[collective] if a in self.allowed[collective]]
        if not allowed:
            raise ValueError(
                f"NBCOLL_ALGO: excludes every algorithm of {collective} "
                f"({', '.join(algorithms.ALGORITHMS[collective])})"
            )
        comm = self.comm
        return tuner.choose(collective, allowed, nbytes, comm.size, comm.config.chunk_bytes, self.link_model())
