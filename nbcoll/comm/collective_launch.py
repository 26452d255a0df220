"""The one hook of the device path in the collectives: run a call as one kernel per rank where ``proto="device"``
(or ``NBCOLL_PROTO=device``) asks for it, before the host path plans it (a mixin of
:class:`~nbcoll.comm.collectives.Collectives`).

Example::

    ran, result = comm._on_device("broadcast", "device", x, None, None, 0, None, False)   # one kernel per rank
"""

from __future__ import annotations

from typing import Any

from nbcoll.comm.collective_checks import CollectiveChecks


class CollectiveLaunch(CollectiveChecks):
    """The device path's hook, ahead of the host path (a mixin of the communicator).

    >>> from nbcoll.comm.collectives import Collectives
    >>> issubclass(Collectives, CollectiveLaunch)
    True
    """

    def _on_device(self, name: str, proto: str | None, sendbuf: Any, recvbuf: Any, op: Any, root: int,
                   algo: str | None, async_op: bool) -> tuple[bool, Any]:  # fmt: skip
        """``(True, result)`` where ``proto="device"`` (or ``NBCOLL_PROTO=device``) ran call ``name`` as one ring
        kernel per rank (:mod:`nbcoll.comm.device_collective`); ``(False, None)``: the host path runs it."""
        if proto is None and self.config.proto is None:  # the common case: nothing to import or decide
            return False, None
        from nbcoll.comm import device_collective

        return device_collective.run(self, name, sendbuf, recvbuf, op, root, algo, async_op, proto)
