"""How a collective call runs once its arguments are checked: on the device path, or planned on the engine and run
now, in the background, or at the end of the open group (a mixin of :class:`~nbcoll.comm.collectives.Collectives`).

Example::

    ran, result = comm._on_device("broadcast", "device", x, None, None, 0, None, False)   # one kernel per rank
"""

from __future__ import annotations

from typing import Any

from nbcoll.comm.check import Signature
from nbcoll.comm.collective_checks import CollectiveChecks
from nbcoll.comm.deferred import DeferredCollective
from nbcoll.comm.work import Work


class CollectiveLaunch(CollectiveChecks):
    """Running a checked collective call (a mixin of the communicator).

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

    def _launch(
        self,
        seq: int,
        name: str,
        algo: str | None,
        async_op: bool,
        signature: Signature,
        build: Any,
        *,
        result: Any,
        nbytes: int,
        single: list[tuple[Any, Any]],
        op: Any = None,
        keep: tuple[Any, Any, Any] | None = None,
    ) -> Any:
        """Plan call ``seq`` on the engine, then run it now, in the background, or at the end of the open group.

        ``keep`` is ``(key, sendbuf, recvbuf)`` of a call whose plan may be kept for replay once it has run.
        """
        queued = not self._group.depth  # a group's calls are bound now, and run at its end
        coll = self.engine.plan(seq, name, algo, signature, build, nbytes=nbytes, single=single, op=op, queued=queued)
        if not async_op and not self._group.depth:  # the common case: run it now, no handle to make
            self.engine.mark_run(seq)
            self.engine.progress.submit([coll], [], wait=True, checked=True)  # engine.call checked it just now
            if keep is not None and coll.replayable is not None:
                planned = coll.op if isinstance(coll, DeferredCollective) else coll  # bound in its turn: coll.op
                self.engine.replays.keep(keep[0], planned, keep[1], keep[2], result)
            return result
        work = Work(f"{coll.headline()} on rank {self.rank}", result)
        if self._group.depth:
            self._group.queue_collective(coll, work)
        else:
            self.engine.mark_run(seq)
            self.engine.progress.submit([coll], [work], wait=False)
        return work if async_op else result
