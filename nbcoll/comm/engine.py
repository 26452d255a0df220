"""The control plane of a communicator: what turns one collective call into an operation, and runs it.

Each :class:`~nbcoll.comm.communicator.Communicator` owns one :class:`Engine`, which holds everything that lives
from one collective call to the next:

* the call numbers, and the refusals of calls whose arguments failed here (:mod:`nbcoll.comm.refusal`);
* the algorithm choice: ``NBCOLL_ALGO`` and the tuner's link model (:mod:`nbcoll.comm.algorithm_choice`);
* the tracer (``NBCOLL_TRACE``), the direct windows of the one-shot algorithms and their LL buffers, set up by
  the first call that needs them, in its turn in the queue (:mod:`nbcoll.comm.deferred`);
* the CPU fast paths it uses (:mod:`nbcoll.comm.fast_paths`): the copy policy, and the plans kept for replay;
* the progress queue every operation runs through (:mod:`nbcoll.comm.progress`).

A collective call goes through it top-down::

    with comm.engine.call("all_reduce") as seq:       # number the call; a failure inside is a refusal
        ...check the arguments, once...
        coll = comm.engine.plan(seq, "all_reduce", algo, signature, (x, y), ...)   # algorithm -> CollectiveOp
        comm.engine.progress.submit([coll], [work], wait=True)                    # watchdog -> steps -> kernels
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.comm import algorithms, tuner
from nbcoll.comm.algorithm_choice import AlgorithmChoice
from nbcoll.comm.algorithms import direct
from nbcoll.comm.check import Signature, compare_across_ranks
from nbcoll.comm.collective_op import CollectiveOp
from nbcoll.comm.deferred import DeferredCollective
from nbcoll.comm.errors import CommAbortedError, CommError
from nbcoll.comm.fast_paths import FastPaths
from nbcoll.comm.ll import LLBuffers, buffer_bytes
from nbcoll.comm.planning import Call, Links, fits_ll, plan_call
from nbcoll.comm.progress import Progress
from nbcoll.comm.refusal import Refusals
from nbcoll.comm.trace import Tracer
from nbcoll.comm.window import DirectWindows
from nbcoll.comm.work import Work, records_of


class Engine:
    """One communicator's control plane: call numbers, algorithm choice, tracer, windows and progress queue.

    Example::

        comm = nbcoll.init()
        with comm.engine.call("barrier") as seq:
            coll = comm.engine.plan(seq, "barrier", None, Signature("barrier", 0, "-", "-", -1), (token,),
                                    nbytes=0, single=[])
        comm.engine.progress.submit([coll], [], wait=True)
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        config = comm.config
        self.refusals = Refusals(comm._wiring.ctrl, config.timeout)
        self.choice = AlgorithmChoice(comm)
        self.checking = config.check
        self.tracer = Tracer(Path(config.trace) / f"rank{comm.rank}.jsonl" if config.trace else None, comm.rank)
        self.progress = Progress(comm.watchdog.drive, comm._check_usable, f"nbcoll-progress-rank{comm.rank}")
        self._windows: DirectWindows | None = None
        self._windows_made = False
        self._windows_failed: str | None = None
        self._ll: LLBuffers | None = None
        self._ll_made = False
        self.device: Any = None  # all_reduce(proto="device"), made at its first call (nbcoll.comm.device_collective)
        self.later: DeferredCollective | None = None  # the last plan left to the queue (see plan)
        self._later_lock = threading.Lock()  # set here, cleared by the queue's thread once that plan is bound
        self.watch: list[Any] | None = None  # while the replay hook watches a call: the plans it makes
        # The CPU fast paths, each in a module of its own, imported only when it is on (NBCOLL_FASTPATH=0: none)
        self.fast = FastPaths.of(config)
        self.copies: Any = None  # a CopyPolicy: which copies stream (nbcoll.comm.copy_policy)
        if self.fast.streams:
            from nbcoll.comm.copy_policy import CopyPolicy

            self.copies = CopyPolicy(self.fast.stream_bytes, self.fast.stream_shared_bytes)
        self.replays: Any = None  # the plans kept for replay; the hook wraps comm's collectives (nbcoll.comm.replay)
        if self.fast.replay:
            from nbcoll.comm import replay

            self.replays = replay.install(comm, self)

    # -- numbering and refusals ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def call(self, name: str) -> Iterator[int]:
        """Number a collective call; an error raised inside before it runs or is queued is a refusal.

        A call whose arguments fail the checks raises before anything moves, but its peers may still run it: the
        refusal is told to them (:meth:`refuse`). An error raised later (a timeout, a mismatch found by
        ``NBCOLL_CHECK``) is not a refusal.
        """
        self.comm._check_usable()
        self.settle()
        seq = self.refusals.number()
        try:
            yield seq
        except Exception:
            if self.refusals.is_open(seq):  # it failed before it was run or queued: a refusal
                self.refuse(seq, name)
            raise

    def number_run(self) -> int:
        """Number a call that has no checks left to fail and mark it run (a replay; :mod:`nbcoll.comm.replay`)."""
        return self._abort_on_conflict(self.refusals.number_run)

    def refuse(self, seq: int, name: str) -> None:
        """This rank refused call ``seq``: make sure its peers learn it (see :mod:`nbcoll.comm.refusal`)."""
        if not self.checking:
            self.refusals.refuse(seq, name)
            return
        comm = self.comm
        try:  # the refusal takes this call's place in the exchange, so every rank raises together
            compare_across_ranks(comm._wiring.ctrl, Signature.refusal(name), comm.config.timeout, self._check_aborted)
        finally:
            self.refusals.skipped(seq)

    def settle(self) -> None:
        """Before a new operation: learn whether the calls this rank refused were refused everywhere."""
        if self.refusals.unsettled:  # only after a refusal: every call passes here
            self._abort_on_conflict(self.refusals.settle, self._check_aborted)

    def mark_run(self, seq: int) -> None:
        """Collective call ``seq`` runs here: abort at once if a peer has refused it."""
        self._abort_on_conflict(self.refusals.ran, seq)

    def _abort_on_conflict(self, step: Callable[..., Any], *args: Any) -> Any:
        """``step(*args)``; a conflict it raises (a call refused by one rank but run by another) aborts the
        communicator here before it propagates, so that no later call reads data left behind."""
        try:
            return step(*args)
        except CommAbortedError:
            self.comm.abort()
            raise

    def _check_aborted(self) -> None:
        self.comm.watchdog.check_aborted()

    # -- running what a group or comm.drive() hands over ------------------------------------------------------

    def run_batch(self, ops: list[Any], works: list[Work]) -> None:
        """Run ``ops`` after everything issued before and wait for them; finish ``works`` with the outcome."""
        if not ops and not works:
            return
        try:
            for op in ops:
                for seq in getattr(op, "seqs", ()):
                    self.mark_run(seq)
        except CommAbortedError as exc:
            self.cancel_batch(ops, works, exc)
            raise
        self.progress.submit(ops, works, wait=True)

    def cancel_batch(self, ops: list[Any], works: list[Work], cause: BaseException) -> None:
        """Give up ``ops``, which never ran: their handles fail, and their collectives count as refused."""
        for op in ops:
            for record in records_of(op):
                record.finish("cancelled")
            for name, _, seq, _ in getattr(op, "parts", ()):  # a collective: tell the peers it will not run
                if self.refusals.is_open(seq):
                    self.refusals.refuse(seq, f"{name} in a comm.group()")
        for work in works:
            error = CommError(
                f"rank {self.comm.rank}: {work.description} cancelled: its group did not run "
                f"({type(cause).__name__}: {cause})"
            )
            work._finish(error)

    # -- choosing an algorithm (nbcoll.comm.algorithm_choice) ----------------------------------------------------

    def choose(self, collective: str, nbytes: int) -> str:
        """The algorithm ``NBCOLL_ALGO`` allows and the tuner predicts fastest for ``nbytes`` per rank."""
        return self.choice.choose(collective, nbytes)

    # -- planning: one call -> one collective operation ---------------------------------------------------------

    def plan(
        self,
        seq: int,
        name: str,
        algo: str | None,
        signature: Signature,
        args: tuple[Any, ...],
        *,
        nbytes: int,
        single: list[tuple[Any, Any]],
        op: Any = None,
        queued: bool = False,
    ) -> CollectiveOp | DeferredCollective:
        """Choose the algorithm, compare the call across ranks (``NBCOLL_CHECK``), and bind this rank's program.

        ``args`` are the algorithm's arguments after its context: the checked buffers (and the root); ``single``
        lists the (input,
        output) pairs that a communicator of one rank copies instead. ``queued``: the call goes to the progress
        queue as it is (not into a group), so a plan that must first set memory up with the peers, or that comes
        behind such a plan, is bound there, in its turn (a :class:`DeferredCollective`).
        """
        comm = self.comm
        if algo is not None:
            algorithms.check_algo(name, algo)
        else:
            algo = self.choose(name, nbytes)
        if self.checking:
            try:
                compare_across_ranks(comm._wiring.ctrl, signature, comm.config.timeout, self._check_aborted)
            except Exception:
                self.refusals.skipped(seq)  # every rank raises here: none runs the call
                raise
        record = comm.recorder.record(name, -1, nbytes, f"{signature} via {algo}")
        bind = functools.partial(self._bind, seq, name, algo, signature, args, nbytes, single, op, record)
        later = self.later
        behind = later is not None and later.pending()
        if queued and (behind or self._sets_up(name, algo, nbytes)):
            with self._later_lock:
                self.later = DeferredCollective(f"{name} #{seq} ({algo})", record, bind, self.progress, self._settled)
            if self.watch is not None:
                self.watch.append(self.later)
            return self.later
        if behind:  # a call of a group, bound here: the plans queued before it number their rounds first
            self.progress.quiesce()
        self._settled(later)  # (one the queue dropped unplanned, when cancelled)
        coll = bind()
        if self.watch is not None:
            self.watch.append(coll)
        return coll

    def _settled(self, later: DeferredCollective | None) -> None:
        """``later`` numbers no more rounds: unless a newer plan was left to the queue, calls may replay again."""
        with self._later_lock:
            if self.later is later:
                self.later = None

    def _sets_up(self, name: str, algo: str, nbytes: int) -> bool:
        """Whether a plan of ``name`` via ``algo`` would first set the LL buffers or the windows up."""
        if algo != "direct" or name not in tuner.ONE_SHOT:
            return False
        return not (
            self._ll_made if fits_ll(name, nbytes, self.comm.size, self.comm.config.ll_bytes) else self._windows_made
        )

    def _bind(self, seq: int, name: str, algo: str, signature: Signature, args: tuple[Any, ...], nbytes: int,
              single: list[tuple[Any, Any]], op: Any, record: Any) -> CollectiveOp:  # fmt: skip
        """The plan of a checked call (:func:`~nbcoll.comm.planning.plan_call`), on the path it takes: LL lines for a
        small one-shot message, else the windows (and registered buffers), else FIFOs. Every input here (algorithm,
        size, settings, transports) is the same on every rank, so is the path."""
        comm = self.comm
        ll = windows = None
        if algo == "direct" and name in tuner.ONE_SHOT:
            fits = fits_ll(name, nbytes, comm.size, comm.config.ll_bytes)
            # The first one-shot call sets the LL buffers or the windows up, with every peer: a refusal is heard there.
            with self.refusals.setting_up(seq) if self._sets_up(name, algo, nbytes) else contextlib.nullcontext():
                call = f"{name} #{seq} ({algo})"
                ll = self.ll_buffers(call) if fits else None
                windows = self.direct_windows(call) if ll is None else None
        links = Links(comm.rank, comm.size, comm.send_connection, comm.recv_connection, comm.peer_counters, windows, ll,
                      self.copies)  # fmt: skip
        call = Call(seq, name, algo, _dtype_named(signature.dtype), args, nbytes, single, op)
        coll = plan_call(call, comm.config, links, record, self.tracer)
        if comm.log.enabled("INFO", "COLL"):  # not formatted when nobody reads it
            comm.log.info("COLL", f"{name} #{seq} via {algo}: {signature}")
        return coll

    def direct_windows(self, call: str = "") -> DirectWindows | None:
        """The direct windows, made at the first one-shot collective; ``None`` unless every peer is on ipc.

        Making them is collective, like the one-shot collective that asks for them: every rank gets here.
        """
        if self._windows_failed is not None:
            raise CommError(
                f"rank {self.comm.rank}: the direct windows of this communicator could not be set up earlier "
                f"({self._windows_failed}); abort or shrink the communicator"
            )
        if not self._windows_made:
            config = self.comm.config
            nbytes = direct.window_bytes(config.buffsize, self.comm.size)
            self._windows = self._map_windows(nbytes, self.fast.cma_bytes, call)
            self._windows_made = True
        return self._windows

    def _map_windows(self, nbytes: int, cma_bytes: int | None = None, call: str = "") -> DirectWindows | None:
        """Collective: windows of ``nbytes`` every rank maps, or ``None`` unless every peer is on ipc. A failure is
        remembered, so that every later one-shot collective on this communicator says why it cannot run.
        ``cma_bytes``: see :class:`DirectWindows` (the LL buffers pass ``None``); ``call``: the call they are for."""
        comm = self.comm
        peers = [p for p in range(comm.size) if p != comm.rank]
        if not peers or any(comm.transport_to(p) != "ipc" for p in peers):
            return None
        wiring = comm._wiring
        try:
            return DirectWindows(wiring.ctrl, nbytes, comm.watchdog.drive, comm.recorder, wiring.uid, cma_bytes, call)
        except BaseException as exc:
            self._windows_failed = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise

    def alloc(self, count: int, dtype: Any) -> Any:
        """Collective: a buffer every peer maps (:meth:`DirectWindows.alloc`), or plain device memory when some
        peer is on another node (no IPC reaches it: the FIFOs carry its data either way)."""
        self._after_queued_plans()
        windows = self.direct_windows("comm.alloc")
        return memory.empty(count, dtype) if windows is None else windows.alloc(count, dtype)

    def free(self, array: Any) -> None:
        """Let go of a buffer from :meth:`alloc` (local; see :meth:`DirectWindows.free`)."""
        self._after_queued_plans()
        windows = self.direct_windows()
        if windows is not None and self.replays is not None:
            self.replays.clear()  # a kept plan may lend the buffer that is freed here
        if windows is not None:
            windows.free(array)

    def _after_queued_plans(self) -> None:
        """Wait for the plans left to the queue: they may be setting the windows up on its thread right now."""
        if self.later is not None and self.later.pending():
            self.progress.quiesce()

    def ll_buffers(self, call: str = "") -> LLBuffers | None:
        """The LL buffers, made at the first small one-shot collective; ``None`` unless every peer is on ipc.

        They are windows of their own (:class:`DirectWindows`, set up the same collective way), so an LL round and
        a window round never share memory or round numbers.
        """
        if self._windows_failed is not None:
            return self.direct_windows(call)  # raises: the communicator cannot set windows up
        if not self._ll_made:
            config = self.comm.config
            windows = self._map_windows(buffer_bytes(config.ll_bytes, config.steps), call=call)
            self._ll = None if windows is None else LLBuffers(windows, config.steps, self.fast.ll_compiled, self.copies)
            self._ll_made = True
        return self._ll

    def close(self) -> None:
        """Release what the engine holds: the call numbers' notes, the direct and LL windows, the trace file."""
        self.refusals.close()
        if self.replays is not None:
            self.replays.clear()
        if self._windows is not None:
            self._windows.close()
        if self._ll is not None:
            self._ll.close()
        if getattr(self.device, "close", None) is not None:
            self.device.close()
        self.tracer.close()


@functools.cache
def _dtype_named(name: str) -> np.dtype:
    """The dtype a signature names (``-``: none, counted in bytes); parsed once per name."""
    return np.dtype(name) if name != "-" else np.dtype(np.uint8)
