"""What runs a checked collective call (a mixin of :class:`~nbcoll.comm.collectives.Collectives`): the device
path's hook, which runs a call as one kernel per rank where ``proto="device"`` (or ``NBCOLL_PROTO=device``) asks
for it, before the host path plans it, and ``estimate``, the tuner's prediction for a call.

Example::

    ran, result = comm._on_device("broadcast", "device", x, None, None, 0, None, False)   # one kernel per rank
    comm.estimate("all_reduce", 1 << 20)                                                  # seconds
"""

from __future__ import annotations

from typing import Any

from nbcoll.comm import algorithms, tuner
from nbcoll.comm.collective_checks import CollectiveChecks


class CollectiveLaunch(CollectiveChecks):
    """The device path's hook and the tuner's estimate (a mixin of the communicator).

    >>> from nbcoll.comm.collectives import Collectives
    >>> issubclass(Collectives, CollectiveLaunch)
    True
    """

    def _on_device(self, name: str, proto: str | None, sendbuf: Any, recvbuf: Any, op: Any, root: int,
                   algo: str | None, async_op: bool) -> tuple[bool, Any]:  # fmt: skip
        """``(True, result)`` where ``proto="device"`` (or ``NBCOLL_PROTO=device``) ran call ``name`` as one ring
        kernel per rank (:mod:`nbcoll.comm.device_ring_calls`); ``(False, None)``: the host path runs it."""
        if proto is None and self.config.proto is None:  # the common case: nothing to import or decide
            return False, None
        from nbcoll.comm import device_ring_calls

        return device_ring_calls.run(self, name, sendbuf, recvbuf, op, root, algo, async_op, proto)

    def estimate(self, collective: str, nbytes: int, algo: str | None = None) -> float:
        """Predicted seconds for ``collective`` of ``nbytes`` (per rank's block) on this communicator.

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> seconds = comm.estimate("all_reduce", 1 << 20, algo="ring")     # the tuner's alpha-beta model
        >>> seconds >= 0
        True
        >>> comm.destroy()
        """
        name = algorithms.canonical_collective(collective) if isinstance(collective, str) else None
        if name is None:
            raise ValueError(f"collective: unknown {collective!r}; expected one of {', '.join(algorithms.ALGORITHMS)}")
        collective = name
        algo = algo or self.engine.choose(collective, nbytes)
        algorithms.check_algo(collective, algo)
        return tuner.estimate(
            collective, algo, nbytes, self.size, self.config.chunk_bytes, self.engine.choice.link_model()
        )
