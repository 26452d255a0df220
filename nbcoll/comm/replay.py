"""Replays: a one-shot collective called again on the same buffers reruns its kept steps, without checks or plan.

A training loop all-reduces the same gradient buffers on every step, and a benchmark the same buffers thousands
of times. For a message of a few bytes, the checks of the arguments and the plan (the tuner's choice, binding the
primitives, building the steps) cost more than the data's trip (``benchmarks/small_messages.py`` times each part),
and at a megabyte they are still a fifth of it.
MPI answers with persistent collectives (``MPI_Allreduce_init``, then ``MPI_Start`` on every call), NCCL users
with CUDA graphs that capture the calls once. nbcoll does it without a new call: after a one-shot collective that
ran over LL lines (:mod:`nbcoll.comm.ll`) or the direct windows (:mod:`nbcoll.comm.window`) has run, the engine
keeps its steps under the call's arguments, and the next call with the very same buffer objects, op, root and
algorithm runs those steps again in new rounds::

    call  comm.all_reduce(x, y)      checks, plan, step [ll_send_recv_reduce_copy] in round 7, kept
    call  comm.all_reduce(x, y)      same x, y, op: the kept steps, rearmed for round 8
    call  comm.all_reduce(x, z)      another output: the checks and the plan again

A CPU fast path (:mod:`nbcoll.comm.fast_paths`; off with ``NBCOLL_FASTPATH=0``, and with ``NBCOLL_CHECK=1``). It
has one hook: :func:`install` wraps the communicator's replayable collectives (:data:`REPLAYABLE`) once, when the
communicator is made, so the collectives themselves know nothing of it. The wrapper looks the call up; a match
reruns the kept steps, anything else runs the collective as written, and the plan of a synchronous one-shot call
is kept once it has run.

What a replay still does is what every call must do: refuse to run on an aborted or destroyed communicator,
number the call and settle earlier refusals (:mod:`nbcoll.comm.refusal`), write the flight recorder, and keep
its place in the progress queue. When nothing else is in flight it runs its steps on the caller's thread while
each is ready, polling a step that is not yet for a short while (:func:`ready_soon`), and hands the first that
must wait longer, with the rest, to the watchdog's loop, which bounds every wait (timeouts, abort, dead peers);
behind work in flight, or traced, it goes through the queue as a whole.

What it skips is only what cannot have changed: a replay is found by the buffers' identities, and it checks that
their shape, strides and dtype and the output's writability are those it was planned with. A kept plan holds its
buffers only while it runs (weakly otherwise), so a buffer the program drops is freed, and its plan forgotten;
``comm.free`` drops every kept plan, since one may lend the freed buffer. An async call, a call inside
``comm.group()`` and every call with ``NBCOLL_CHECK`` on (which compares each call across ranks) take the full
path.

Example::

    comm.all_reduce(x, y)                    # the full path; its plan is kept
    comm.all_reduce(x, y)                    # a replay: the same steps, in the next round
    comm.engine.replays.hits                 # 1 (comm.engine.replays is None with the fast paths off)
"""

from __future__ import annotations

import functools
import inspect
import os
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from nbcoll import backend, memory
from nbcoll.comm.collective_op import CollectiveOp

MAX_REPLAYS = 32
"""Plans kept per communicator; the oldest goes first (a loop calls few signatures; one-off calls pass through)."""

REPLAYABLE = {"all_reduce": "op", "broadcast": "root", "all_gather": None, "reduce_scatter": "op", "all_to_all": None}
"""The collectives a replay may rerun, and the argument besides the buffers and ``algo`` that names the call."""

NOTE_PROBE_SECONDS = 1e-3
"""A replayed call asks MPI for peers' notes at most this often (:meth:`Replays.start`)."""

SHORT_POLL_SECONDS = 1e-3
"""How long :func:`ready_soon` polls one step on the caller's thread before the watchdog's loop takes it over. A
replayed call runs alone, and its peer is most often a few microseconds behind: a bare poll between two yields of
the core costs less than a pass of the loop, so it notices the peer sooner and leaves more of the core to a peer
that shares it (four ranks on two cores). Abort and dead peers are noticed by the loop, every
:data:`~nbcoll.comm.watchdog.HEALTH_CHECK_INTERVAL`, which this poll delays by at most its length."""


def install(comm: Any, engine: Any) -> Replays:
    """The hook: wrap each of ``comm``'s :data:`REPLAYABLE` collectives once; return the plans they keep.

    ``engine`` is ``comm``'s, which is being made (:class:`~nbcoll.comm.engine.Engine` calls this).
    """
    replays = Replays(comm, engine)
    for name, extra in REPLAYABLE.items():
        setattr(comm, name, _persistent(replays, comm, name, extra))
    return replays


def _persistent(replays: Replays, comm: Any, name: str, extra: str | None) -> Callable[..., Any]:
    """``comm``'s collective ``name``, replayed when called again with the same buffers and arguments. The method
    is looked up on the class at each call, as a plain ``comm.name(...)`` would."""
    cls = type(comm)
    parameters = inspect.signature(getattr(cls, name)).parameters
    names = list(parameters)[1:]  # after self
    default = "-" if extra is None else parameters[extra].default

    @functools.wraps(getattr(cls, name))
    def collective(*args: Any, **kwargs: Any) -> Any:
        method = getattr(cls, name).__get__(comm, cls)
        if len(args) > len(names) or not replays.enabled:
            return method(*args, **kwargs)  # (too many arguments: the method says so)
        given = dict(zip(names, args, strict=False))  # (fewer arguments than names)
        if kwargs:
            given.update(kwargs)
        return replays.call(method, args, kwargs, given, "-" if extra is None else given.get(extra, default))

    return collective


def ready_soon(step: Any) -> bool:
    """Poll ``step.ready()`` between yields of the core for up to :data:`SHORT_POLL_SECONDS`; return whether it
    became ready (if not, the caller hands it to the watchdog's loop, which bounds the wait)."""
    deadline = time.perf_counter() + SHORT_POLL_SECONDS
    while time.perf_counter() < deadline:
        os.sched_yield()
        if step.ready():
            return True
    return False


def _flat(x: Any) -> Any:
    """The 1-D view the collective's checks made of a contiguous buffer."""
    return x if x.ndim == 1 else x.reshape(x.size)


class Replay:
    """One kept plan: the steps of a one-shot collective (LL or window rounds) and what its call passed.

    Example::

        replay = Replay(coll, steps, sendbuf, recvbuf, result, forget=lambda ref: None)
        if replay.matches(sendbuf, recvbuf):
            replay.run(replays, sendbuf, recvbuf)
    """

    def __init__(
        self, coll: CollectiveOp, steps: list[Any], sendbuf: Any, recvbuf: Any, result: Any, forget: Any
    ) -> None:
        name, algo, _, record = coll.parts[0]
        self.name, self.algo, self.nbytes, self.what = name, algo, record.nbytes, record.what
        self.steps = steps
        self.rounds = [step for step in steps if hasattr(step, "rearm")]  # the LL or window steps, numbered per call
        self.numbering = self.rounds[0].numbering  # the LL buffers or the direct windows
        first = min(step.round for step in self.rounds)
        self.offsets = [step.round - first for step in self.rounds]
        self.count = max(self.offsets) + 1
        self.prims = list({id(step.prims): step.prims for step in steps}.values())  # what binds the buffers
        self.send_ref = weakref.ref(sendbuf, forget)  # ``forget`` runs when the program drops the buffer
        self.recv_ref = None if recvbuf is None else weakref.ref(recvbuf, forget)
        self.layout = (sendbuf.shape, sendbuf.strides, sendbuf.dtype)
        self.out_layout = None if recvbuf is None else (recvbuf.shape, recvbuf.strides, recvbuf.dtype)
        self.backend = backend.get_backend()
        self.result_is_send = result is sendbuf
        self._bind(None, None)  # between calls the plan holds no buffer

    def _bind(self, local: Any, out: Any) -> None:
        """Give the kept primitives this call's buffers (the input and the output, as the collective bound them)."""
        for prims in self.prims:
            prims.local, prims.out = local, out

    def matches(self, sendbuf: Any, recvbuf: Any) -> bool:
        """Whether this call passes the objects the plan was made for, unchanged since, on the same backend."""
        if self.send_ref() is not sendbuf or (self.recv_ref() if self.recv_ref else None) is not recvbuf:
            return False
        if (sendbuf.shape, sendbuf.strides, sendbuf.dtype) != self.layout:
            return False
        if recvbuf is not None and (recvbuf.shape, recvbuf.strides, recvbuf.dtype) != self.out_layout:
            return False
        return memory.is_writable(recvbuf if recvbuf is not None else sendbuf) and backend.get_backend() == self.backend

    def run(self, replays: Replays, sendbuf: Any, recvbuf: Any) -> Any:
        """Run the kept steps as a new call, in the next rounds; return what the call returns."""
        engine = replays.engine
        comm = engine.comm
        seq = replays.start()  # usable, earlier refusals settled, numbered as every call is
        first = self.numbering.reserve(self.count)
        for step, offset in zip(self.rounds, self.offsets, strict=True):
            step.rearm(first + offset)
        record = comm.recorder.record(self.name, -1, self.nbytes, self.what)
        if comm.log.enabled("INFO", "COLL"):
            comm.log.info("COLL", f"{self.name} #{seq} via {self.algo} (replayed): {self.what}")
        local = _flat(sendbuf)
        self._bind(local, local if recvbuf is None else _flat(recvbuf))
        try:
            here = not engine.tracer.enabled  # nothing in flight: run on this thread (else through the queue)
            if not (here and engine.progress.run_here(lambda: self._run_ready_steps(engine, record, seq))):
                engine.progress.submit([self._operation(0, record, seq, engine)], [], wait=True, checked=True)
        finally:
            self._bind(None, None)
        return sendbuf if self.result_is_send else recvbuf

    def _run_ready_steps(self, engine: Any, record: Any, seq: int) -> None:
        """Run the steps while each is ready, or becomes so after a short poll (:func:`ready_soon`); the first
        one that must wait longer goes to the watchdog's loop with the rest, which bounds the wait (timeout, abort,
        dead peer) as for every other operation."""
        watchdog = engine.comm.watchdog
        for i, step in enumerate(self.steps):
            if not step.ready() and not ready_soon(step):
                watchdog.drive([self._operation(i, record, seq, engine)])
                return
            try:
                step.run()
            except BaseException:
                record.finish("failed")
                watchdog.failed = True  # as the watchdog marks its own failures: messages may be left
                raise
        record.finish()

    def _operation(self, first: int, record: Any, seq: int, engine: Any) -> CollectiveOp:
        """The kept steps from ``first`` on, as an operation the progress queue and the watchdog run."""
        return CollectiveOp(self.name, self.algo, [iter(self.steps[first:])], record, engine.tracer, seq)


class Replays:
    """The plans one communicator keeps, found by the arguments of the call (made by :func:`install`).

    Example::

        key, replay = replays.find("all_reduce", x, y, "sum", None)   # replay: None until such a call has run
    """

    def __init__(self, comm: Any, engine: Any) -> None:
        self.comm = comm
        self.engine = engine
        self.enabled = True  # benchmarks turn replays off to time the planned path
        self.kept: dict[Hashable, Replay] = {}
        self.hits = 0
        self._next_note_probe = 0.0  # when a replayed call next asks MPI for notes (start)

    def call(self, method: Callable[..., Any], args: tuple, kwargs: dict[str, Any], given: dict[str, Any],
             extra: Any) -> Any:  # fmt: skip
        """Collective ``method(*args, **kwargs)`` (``given``: the arguments by name): a replay of its kept plan, or
        the full path."""
        comm, engine = self.comm, self.engine
        if given.get("proto") is not None or comm.config.proto is not None:
            return method(*args, **kwargs)  # the device path decides first (nbcoll.comm.collective_launch)
        sendbuf, recvbuf = given.get("sendbuf"), given.get("recvbuf")
        deferred = given.get("async_op", False) or comm._group.depth or engine.later
        key, replay = self.find(method.__name__, sendbuf, recvbuf, extra, given.get("algo"), deferred)
        if replay is not None:
            return replay.run(self, sendbuf, recvbuf)  # the same call again: no checks, no plan
        if key is None:
            return method(*args, **kwargs)
        engine.watch = plans = []
        try:
            result = method(*args, **kwargs)
        finally:
            engine.watch = None
        if len(plans) == 1:  # (a plan bound in its turn in the queue holds the operation it made: .op)
            self.keep(key, getattr(plans[0], "op", None) or plans[0], sendbuf, recvbuf, result)
        return result

    def start(self) -> int:
        """Number a replayed call and mark it run: what ``engine.call`` and ``engine.mark_run`` do for a call that
        has no checks left to fail, so nothing between them can refuse it.

        The same steps, with the usability check's common case written out. MPI is asked whether a peer's note (an
        abort, a refusal) has arrived at most once per :data:`NOTE_PROBE_SECONDS`: in a 2-rank loop of small calls,
        a probe on every call (MPI's progress engine) cost about 5% of the call. A note is still heard in time:
        replays run over the windows of ranks on one machine, whose aborts are on the control page, read on every
        call, and a call that a peer refused waits for that peer in the watchdog's loop, which probes on every pass.
        """
        comm, engine = self.comm, self.engine
        now = time.monotonic()
        probe = now >= self._next_note_probe
        if probe:
            self._next_note_probe = now + NOTE_PROBE_SECONDS
        if comm._poll_aborted(probe) is not None or comm.closed:
            comm._check_usable()  # raises, saying why
        engine.settle()
        return engine.number_run()

    def find(
        self, name: str, sendbuf: Any, recvbuf: Any, extra: Any, algo: Any, deferred: Any = False
    ) -> tuple[Hashable | None, Replay | None]:
        """What identifies the call, and its kept plan if there is one and it matches (else ``None``).

        The key is ``None`` for a call that is never replayed: ``deferred`` (async, or in a group), or with
        arguments a key cannot hold (an op object such as premul_sum). One method, not a key and then a lookup:
        a small replayed collective pays for every call it makes on the way.
        """
        if deferred or not isinstance(extra, (str, int)) or not (algo is None or isinstance(algo, str)):
            return None, None
        key = (name, id(sendbuf), id(recvbuf), extra, algo)
        replay = self.kept.get(key)
        if replay is None or not replay.matches(sendbuf, recvbuf):
            return key, None
        self.hits += 1
        return key, replay

    def keep(self, key: Hashable | None, coll: CollectiveOp, sendbuf: Any, recvbuf: Any, result: Any) -> None:
        """Keep ``coll``'s plan under ``key`` if it can be replayed: one-shot rounds, steps kept (see module doc)."""
        steps = getattr(coll, "replayable", None)
        if key is None or steps is None or not any(hasattr(s, "rearm") for s in steps):
            return  # (a collective of nothing has no round to renumber; it costs nothing to plan either)
        if not all(b is None or memory.as_device_array(b) is b for b in (sendbuf, recvbuf)):
            return  # another library's array, wrapped for this call: its memory could move under the same shape
        if key not in self.kept and len(self.kept) >= MAX_REPLAYS:
            del self.kept[next(iter(self.kept))]
        self.kept[key] = Replay(coll, steps, sendbuf, recvbuf, result, forget=lambda _ref: self.kept.pop(key, None))

    def clear(self) -> None:
        self.kept.clear()
