"""A collective planned only when its turn in the progress queue comes: what a communicator's first one-shot call is.

The first small (LL) or one-shot (window) collective of a communicator sets that memory up with every peer
(:mod:`nbcoll.comm.window`): an exchange of handles that lasts until each peer reaches its own first such call.
Done inside the call, it would hold the caller there, and ``comm.all_reduce(x, async_op=True)`` would not return.
A rank whose next call is a blocking one on another communicator, one that its peer issues first, would then never
issue it, and both would wait until ``NBCOLL_TIMEOUT``. So such a call is queued unplanned, as a
:class:`DeferredCollective`: when the progress queue (:mod:`nbcoll.comm.progress`) reaches it, on the thread that
runs it, it sets the memory up and binds the plan, then runs it. An async caller has its handle at once, a blocking
one waits its turn as for any call, and an error of the set-up (a timeout, a peer lost) fails the call's handle.

Every plan after it on the communicator is queued so too until it is bound: a plan numbers the rounds of the LL
buffers and of the windows, and every rank must number them in the order the calls were issued.

Example::

    later = DeferredCollective("all_reduce #3 (direct)", record, bind, progress)   # bind() -> CollectiveOp
    progress.submit([later], [work], wait=False)      # the queue runs later.prepare(), then the op it returns
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbcoll.comm.collective_op import CollectiveOp
from nbcoll.comm.debug import OperationRecord


class DeferredCollective:
    """A collective call whose plan ``bind()`` makes when the queue reaches it; :meth:`prepare` is that moment.

    Example::

        later = DeferredCollective("all_gather #1 (direct)", record, bind, comm.engine.progress)
        op = later.prepare()          # on the queue's thread: sets the LL buffers up, then plans
    """

    kind = "collective"
    done = False

    def __init__(
        self,
        headline: str,
        record: OperationRecord,
        bind: Callable[[], CollectiveOp],
        progress: Any,
        settled: Callable[[DeferredCollective], None] = lambda later: None,
    ) -> None:
        self._headline, self.record, self._bind, self._progress = headline, record, bind, progress
        self._on_settled = settled  # told once it numbers no more rounds
        self.op: CollectiveOp | None = None
        self.settled = False  # planned, or failed to be: it numbers no more rounds

    def prepare(self) -> CollectiveOp:
        """Set up what the call needs, with every peer, and plan it: the operation to drive in its place."""
        try:
            self.op = self._bind()
        except BaseException:
            self.record.finish("failed")
            raise
        finally:
            self.settled = True
            self._on_settled(self)
        return self.op

    def pending(self) -> bool:
        """Whether it may still number rounds: not planned yet, and still queued or running (not cancelled)."""
        return not self.settled and self._progress.active()

    @property
    def replayable(self) -> Any:
        """The planned op's steps when they may be run again (:mod:`nbcoll.comm.replay`), once it is planned."""
        return None if self.op is None else self.op.replayable

    def headline(self) -> str:
        return self._headline
