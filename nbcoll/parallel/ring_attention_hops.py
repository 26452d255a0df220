"""Ring attention's hops, overlapped with its compute: post the next block's transfer, compute, then wait.

At each step of the ring a rank computes on the key/value block it holds while that block travels on to the
next rank and the following block arrives from the previous one::

    step s:  hop = post(send block s to rank + 1, receive block s + 1 from rank - 1, into the other buffer)
             compute my queries against block s          <- the hop is in flight meanwhile
             block = hops.wait(hop)                      <- block s + 1, for step s + 1

A hop is one :meth:`~nbcoll.comm.communicator.Communicator.batch_isend_irecv` of the block's arrays to the next
rank and as many from the previous one: *posting* it hands the batch to the communicator's progress queue and
returns at once with its works, which run while the caller computes; its wait waits for them and returns the
arrays received, or raises the error. One batch is run round robin, so a ring of exchanges larger than the FIFO
cannot deadlock; the queue runs the batches in posting order, and every rank posts the same hops in the same
order, so the connections are used in step. Whatever else the caller issues on the communicator meanwhile runs
behind the hops in flight.

Double buffering: a hop receives into one of two buffer sets, in turn (hop ``s`` into set ``s % 2``), never into
the block being computed on or the block being sent, which is the one received a hop before (or the caller's
own). The set a hop reuses held the block of two steps back, whose compute and onward send have both finished.

Errors: a hop that fails (``NBCOLL_TIMEOUT``, an abort, a lost peer) raises its error, which names the
operation, the rank and the peer, from its wait. A hop posted once an earlier one is known to have failed fails
with it, without moving; those already posted behind it run in their turn (after a timeout the ranks are out of
step, and they usually fail too). The watchdog bounds every operation of the queue, so a wait on a hop ends. Leaving
the ``with`` block waits for the hops still in flight (after an error their own errors are dropped), so the
communicator is idle again when the call returns or raises.

:func:`watch` shows the schedule: it calls a function with a :class:`HopEvent` at each post, compute and wait.

Example::

    with RingHops(comm, "forward", to=(rank + 1) % n, source=(rank - 1) % n) as hops:
        for step in range(n):
            if step < n - 1:
                hop = hops.post("kv", step + 1, block, next_shapes)
            hops.note("compute", "block", step, block)      # seen by watch(), as are post and wait
            compute(block)
            if step < n - 1:
                block = hops.wait(hop)
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nbcoll import memory
from nbcoll.comm.point_to_point import P2POp
from nbcoll.kernels import copy as copy_kernels

if TYPE_CHECKING:
    from nbcoll.comm import Communicator
    from nbcoll.comm.work import Work


@dataclass(frozen=True)
class HopEvent:
    """One moment of a ring pass, as :func:`watch` sees it.

    ``name``: ``"post"`` (a hop handed over), ``"compute"`` and ``"computed"`` (the compute on a block begins and
    ends), or ``"wait"`` (a hop's wait returned). ``what``: the hop's payload (``"kv"``, or the ``"grads"``
    travelling with them in backward) or ``"block"`` for compute. ``step``: for compute the ring step; for a
    hop the step whose block or gradients it brings. ``block``: the arrays computed on (compute events);
    ``in_flight``: the hops posted and not yet waited for at that moment.

    >>> from nbcoll.parallel.ring_attention_hops import HopEvent
    >>> HopEvent(rank=0, ring="forward", name="post", what="kv", step=1)
    HopEvent(rank=0, ring='forward', name='post', what='kv', step=1, block=(), in_flight=())
    """

    rank: int
    ring: str
    name: str
    what: str
    step: int
    block: tuple = ()
    in_flight: tuple = ()


_watchers: list[Callable[[HopEvent], None]] = []


@contextlib.contextmanager
def watch(fn: Callable[[HopEvent], None]) -> Iterator[None]:
    """Call ``fn(event)`` at every post, compute and wait of the ring passes run inside, on the rank's thread.

    ``fn`` sees every rank of a loopback world (tell them apart by ``event.rank``); an error it raises is raised
    by the ring pass, as if the rank had failed there.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.comm import loopback
    >>> from nbcoll.parallel import ring_attention
    >>> from nbcoll.parallel.ring_attention_hops import watch
    >>> x = nbcoll.tensor(np.ones((1, 1, 2, 2)))
    >>> seen = []
    >>> with watch(lambda e: seen.append(f"{e.name} {e.what} {e.step}") if e.rank == 0 else None):
    ...     _ = loopback.run(2, lambda comm: ring_attention(x, x, x, comm))
    >>> seen
    ['post kv 1', 'compute block 0', 'computed block 0', 'wait kv 1', 'compute block 1', 'computed block 1']
    """
    _watchers.append(fn)
    try:
        yield
    finally:
        _watchers.remove(fn)


class Hop:
    """One posted hop: ``sent`` going to the next rank of the ring, ``received`` filling from the previous one.

    ``works`` are the :class:`~nbcoll.comm.work.Work` handles of its sends and receives (none for a hop that
    failed before it was posted: it holds that ``error``).

    >>> import numpy as np
    >>> from nbcoll.parallel.ring_attention_hops import Hop
    >>> hop = Hop("kv", 1, [np.ones(2)], [np.zeros(2)], works=[], error=RuntimeError("an earlier hop failed"))
    >>> hop.landed()                               # it will never move: it has failed already
    True
    """

    def __init__(self, what: str, step: int, sent: list[Any], received: list[Any], works: list[Work],
                 error: BaseException | None = None) -> None:  # fmt: skip
        self.what, self.step = what, step
        self.sent, self.received = sent, received
        self.works = works
        self._error = error
        self.waited = False

    def landed(self, timeout: float | None = 0) -> bool:
        """Whether the hop has finished (arrived or failed), waiting at most ``timeout`` seconds for it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for work in self.works:
            if not work.is_completed():
                with contextlib.suppress(Exception):  # its error is the wait's to raise
                    work.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if not work.is_completed():
                    return False
        return True

    def failure(self) -> BaseException | None:
        """The error of a hop that has finished and failed (``None`` while in flight or once arrived)."""
        if self._error is None:
            for work in self.works:
                if work.is_completed():
                    try:
                        work.wait()
                    except Exception as exc:
                        self._error = exc
                        break
        return self._error

    def wait(self) -> list[Any]:
        """The arrays received, once they have all arrived; the hop's error if it failed."""
        self.landed(timeout=None)  # bounded: the communicator's watchdog ends every operation of its queue
        self.waited = True
        error = self.failure()
        if error is not None:
            raise error
        return self.received

    def __repr__(self) -> str:
        return f"Hop({self.what!r}, step {self.step}, {'landed' if self.landed() else 'in flight'})"


class RingHops:
    """The hops of one ring pass, each a ``comm.batch_isend_irecv`` in flight while the caller computes.

    Each hop sends its arrays to rank ``to`` and receives as many from rank ``source``. Use it as a ``with``
    block: leaving it waits for what is still in flight.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.comm import loopback
    >>> from nbcoll.parallel.ring_attention_hops import RingHops
    >>> def shift(comm):
    ...     n = comm.size
    ...     with RingHops(comm, "forward", to=(comm.rank + 1) % n, source=(comm.rank - 1) % n) as hops:
    ...         hop = hops.post("kv", 1, [nbcoll.to_device(np.full(2, comm.rank))], [(2,)])
    ...         return nbcoll.to_host(hop.wait()[0])
    >>> loopback.run(3, shift)
    [array([2, 2]), array([0, 0]), array([1, 1])]
    """

    def __init__(self, comm: Communicator, ring: str, to: int, source: int) -> None:
        self.comm, self.ring, self.to, self.source = comm, ring, to, source
        self.posted: list[Hop] = []
        self._buffers: dict[str, list[list[Any]]] = {}  # per payload: two sets of flat receive buffers

    def post(self, what: str, step: int, arrays: Sequence[Any], shapes: Sequence[tuple[int, ...]],
             fresh: bool = False) -> Hop:  # fmt: skip
        """Hand over the hop that sends ``arrays`` and receives arrays of ``shapes`` (and their dtypes) into
        buffer set ``step % 2`` of payload ``what``, or into new arrays with ``fresh`` (those the caller keeps)."""
        sent = [copy_kernels.contiguous(a) for a in arrays]
        dtypes = [a.dtype for a in arrays]
        received = self._receive_buffers(what, step, shapes, dtypes, fresh)
        failed = next((error for hop in self.posted if (error := hop.failure()) is not None), None)
        if failed is not None:  # the ranks are not in step any more: nothing more moves
            hop = Hop(what, step, sent, received, [], failed)
        else:
            ops = [P2POp("isend", a, self.to) for a in sent] + [P2POp("irecv", b, self.source) for b in received]
            hop = Hop(what, step, sent, received, self.comm.batch_isend_irecv(ops))
        self.posted.append(hop)
        self.note("post", what, step)
        return hop

    def wait(self, hop: Hop) -> list[Any]:
        """``hop.wait()``, seen by :func:`watch`."""
        received = hop.wait()
        self.note("wait", hop.what, hop.step)
        return received

    def note(self, name: str, what: str, step: int, block: Sequence[Any] = ()) -> None:
        """Tell the watchers (if any) what happens now."""
        if _watchers:
            in_flight = tuple(hop for hop in self.posted if not hop.waited)
            event = HopEvent(self.comm.rank, self.ring, name, what, step, tuple(block), in_flight)
            for fn in list(_watchers):
                fn(event)

    def _receive_buffers(self, what: str, step: int, shapes: Sequence[tuple[int, ...]], dtypes: list[Any],
                         fresh: bool) -> list[Any]:  # fmt: skip
        if fresh:
            return [memory.empty(shape, dtype) for shape, dtype in zip(shapes, dtypes, strict=True)]
        flats = self._buffers.setdefault(what, [[], []])[step % 2]
        views = []
        for i, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True)):
            size = math.prod(shape)
            if i == len(flats):
                flats.append(None)
            if flats[i] is None or flats[i].size < size or flats[i].dtype != dtype:  # grown for a longer block
                flats[i] = memory.empty((size,), dtype)
            views.append(flats[i][:size].reshape(shape))
        return views

    def close(self) -> None:
        """Wait for the hops still in flight (their errors dropped: the caller has one already)."""
        for hop in self.posted:
            if not hop.waited:
                with contextlib.suppress(Exception):
                    hop.wait()

    def __enter__(self) -> RingHops:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["Hop", "HopEvent", "RingHops", "watch"]
