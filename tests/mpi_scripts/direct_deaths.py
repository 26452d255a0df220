"""A rank that dies in the middle of a one-shot collective, on the LL path and on the direct windows.

``mpiexec -n N python direct_deaths.py STAGE [STAGE ...]``, each ``STAGE`` a list of cases run side by side,
``name@n+name@n``: the ranks still alive are dealt out, in order, to the cases of the stage (``n`` ranks each;
any left over sit it out), and each case runs on a communicator of its own. In a case one rank, the *victim*,
calls ``os._exit`` (as a crash: no clean-up of any kind) at a chosen point of the collective:

* point ``-2``: it never calls ``comm.alloc`` (the windows exist: the registration's own exchange waits);
* point ``-1``: it never calls the collective;
* point ``k >= 0``: it exits just before the ``k``-th one-shot step it would run (LL or window steps, counted
  from 0), or just after the collective if it has fewer steps: ``1`` is after writing its LL lines, or after
  posting its first window round. An LL step that writes and then reads counts as two: its write, first thing
  in its poll, then its read.

Every survivor must then either raise :class:`~nbcoll.comm.CommPeerLostError` naming its rank, the victim and the
collective, well within ``NBCOLL_TIMEOUT`` (the dead-peer check, not the timeout, must end the wait), or, where
the victim wrote everything the survivors read before it died, finish with the exact result; never hang, never
return a wrong result. A victim that stops instead (``SIGSTOP``: alive but silent) makes the survivors raise
:class:`~nbcoll.comm.CommTimeoutError` after the case's ``NBCOLL_TIMEOUT`` of 1.5 s, naming the same; then they
resume it, and it exits. After each stage no ``/dev/shm`` name of the victims nor of the survivors is left, and
the survivors carry on among themselves.

Run with ``NBCOLL_LL_BYTES=64``; every case's communicator has windows of 256 bytes (:data:`WINDOW_BYTES`): 8 int32
go by LL, 24 take one window round, 100 four.
Every rank prints ``pid=...``, one ``case ...`` line per case it ran, and ``direct deaths ok`` if it survived.
"""

from __future__ import annotations

import atexit
import dataclasses
import glob
import os
import re
import signal
import sys
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from nbcoll.comm import CommConfig, CommPeerLostError, CommTimeoutError, init, window
from nbcoll.comm.algorithms import direct
from nbcoll.comm.ll import LLStep
from nbcoll.comm.window_step import OpenOutput, Release, WindowStep, WriteShares
from nbcoll.kernels import ll as ll_kernels

print(f"pid={os.getpid()}", flush=True)

WINDOW_BYTES = 256
"""The window of every rank in every case, whatever its number of ranks (:func:`buffsize_for_windows`)."""


def buffsize_for_windows(nranks: int) -> int:
    """The ``NBCOLL_BUFFSIZE`` that gives ``nranks`` ranks windows of :data:`WINDOW_BYTES` (a window holds it for
    every two ranks: :func:`~nbcoll.comm.protocol_direct.window_bytes`)."""
    buffsize = WINDOW_BYTES // ((nranks + 1) // 2)
    assert direct.window_bytes(buffsize, nranks) == WINDOW_BYTES, nranks
    return buffsize


LL, ONE_ROUND, ROUNDS = 8, 24, 100
"""Elements per block: one LL round, one window round, four window rounds (window of 256 bytes, whose rounds take
its two halves of 128 bytes in turn; LL of 64)."""


@dataclass(frozen=True)
class Case:
    collective: str  # all_reduce, all_gather, all_to_all, reduce_scatter or broadcast
    path: str  # ll; registered (comm.alloc: lent to the peers), staged (plain: through the window), or lent_by_victim
    # (only the victim's input is registered); written: a broadcast whose outputs are registered too, so the root
    # writes a share of every chunk into them; by_address: plain inputs the peers read out of their owner's process
    count: int  # elements per block (all-to-all, reduce-scatter: per destination)
    point: int  # one-shot steps the victim runs before it exits; -1: it never calls the collective, -2 comm.alloc
    victim: int = -1  # its rank in the case's communicator; -1 the last (a broadcast's root is the victim)
    expect: str = "lost"  # what the survivors see: "lost" (CommPeerLostError), "timeout" or "done" (exact result)
    warm: bool = True  # run the collective once, fault-free, first: the windows exist when the victim dies
    async_op: bool = False
    torn: bool = False  # the victim dies halfway through storing its LL lines (at its step ``point``, an LL send)
    stop: bool = False  # the victim stops (SIGSTOP) instead of exiting: the survivors time out
    in_setup: str = ""  # the victim exits at this exchange of the windows' setup, its own segment created
    says: tuple[str, ...] = ()  # what the survivors' error names besides their rank and the victim (the collective)
    root: int = -1  # a broadcast's root; -1: the victim


CASES = {
    # LL: the lines carry their own flag, so what a dead writer stored is still there to read.
    "ll_all_reduce_never_comes": Case("all_reduce", "ll", LL, -1),
    "ll_all_reduce_dies_after_writing": Case("all_reduce", "ll", LL, 1, expect="done"),
    "ll_all_gather_dies_before_writing": Case("all_gather", "ll", LL, 0, victim=0),
    "ll_all_gather_dies_after_writing": Case("all_gather", "ll", LL, 1, victim=0, expect="done"),
    "ll_all_to_all_dies_before_writing": Case("all_to_all", "ll", 2, 0),
    "ll_reduce_scatter_dies_before_writing": Case("reduce_scatter", "ll", 2, 0, victim=0),
    "ll_all_reduce_dies_halfway_through_its_lines": Case("all_reduce", "ll", LL, 0, torn=True),
    "ll_async_all_reduce_in_flight": Case("all_reduce", "ll", LL, 0, async_op=True),
    "ll_setup_never_comes": Case("all_reduce", "ll", LL, -1, warm=False, says=("window setup", "first one-shot")),
    # Windows, several rounds: the victim posts some and leaves the survivors waiting for the next.
    "registered_all_reduce_dies_mid_rounds": Case("all_reduce", "registered", ROUNDS, 3),
    "staged_all_reduce_dies_mid_rounds": Case("all_reduce", "staged", ROUNDS, 3, victim=0),
    "registered_all_gather_dies_mid_rounds": Case("all_gather", "registered", ROUNDS, 3, victim=0),
    "staged_all_gather_dies_mid_rounds": Case("all_gather", "staged", ROUNDS, 3),
    "registered_all_to_all_dies_mid_rounds": Case("all_to_all", "registered", ONE_ROUND, 3),
    "staged_all_to_all_never_comes": Case("all_to_all", "staged", ONE_ROUND, -1),
    "registered_broadcast_root_dies_mid_rounds": Case("broadcast", "registered", ROUNDS, 3),
    "staged_broadcast_root_dies_mid_rounds": Case("broadcast", "staged", ROUNDS, 3, victim=0),
    # The root writes into the readers' outputs: it dies before its second round's writes (its steps: send, write,
    # send, write), and the readers must not return without them; or a reader never opens its second round.
    "written_broadcast_root_dies_before_writing": Case("broadcast", "written", ROUNDS, 3),
    "written_broadcast_reader_dies_mid_rounds": Case("broadcast", "written", ROUNDS, 2, root=0),
    # The victim posts its one round and dies before reading the others': the lenders wait in direct_release for
    # a reader that will never come; survivors that lent nothing owe it nothing, and finish.
    "registered_all_gather_reader_dies_before_release": Case(
        "all_gather", "registered", ONE_ROUND, 1, says=("all_gather", "direct_release")
    ),
    "registered_all_reduce_reader_dies_before_release": Case(
        "all_reduce", "registered", ONE_ROUND, 1, victim=0, says=("all_reduce", "direct_release")
    ),
    "staged_all_gather_reader_dies_after_posting": Case("all_gather", "staged", ONE_ROUND, 1, expect="done"),
    # The victim lent its buffer and died after posting: the others read a dead process's memory, still mapped.
    "lent_by_victim_all_gather_dies_after_posting": Case("all_gather", "lent_by_victim", ROUNDS, 7, expect="done"),
    # A plain input lent by address: the victim dies after posting round 2; what it posted is gone with its process.
    "by_address_all_gather_dies_mid_rounds": Case("all_gather", "by_address", ROUNDS, 3, victim=0),
    # The first one-shot call sets the windows up: the victim dies holding a segment whose name it never removed.
    "ll_setup_dies_holding_its_window": Case(
        "all_reduce", "ll", LL, 0, warm=False, in_setup="handles", says=("window setup (handles)",)
    ),
    "window_setup_dies_once_mapped": Case(
        "all_gather", "staged", ONE_ROUND, 0, warm=False, in_setup="handles-mapped", says=("handles-mapped",)
    ),
    "registration_never_comes": Case("all_gather", "registered", ONE_ROUND, -2, warm=False, says=("setup (reg0",)),
    # Alive but silent: only the timeout ends the wait, and it names the rank that is late.
    "registered_all_reduce_stops_mid_rounds": Case("all_reduce", "registered", ROUNDS, 3, stop=True, expect="timeout"),
    "registered_all_gather_reader_stops_before_release": Case(
        "all_gather", "registered", ONE_ROUND, 1, stop=True, expect="timeout", says=("all_gather", "finish reading")
    ),
    "ll_all_gather_stops_before_writing": Case("all_gather", "ll", LL, 0, victim=0, stop=True, expect="timeout"),
}
STOPPED_TIMEOUT = 1.5


# -- the victim's exit: counted at every one-shot step -------------------------------------------------------------


class Exit:
    at: int | None = None  # exit before this step (counted from 0)
    steps = 0
    torn = stop = False

    @classmethod
    def arm(cls, case: Case) -> None:
        cls.at, cls.steps, cls.torn, cls.stop = case.point, 0, case.torn, case.stop


def store_half_then_die(step: LLStep) -> None:
    """Store the first half of this rank's lines of the round, as a writer cut off in the middle would."""
    half = step.words // 2
    words = step.prims.local[step.lo : step.hi].view(np.uint32)[:half]
    ll_kernels.store(step.ll.lines(step.ll.rank, step.round, 0, half), words, step.round)
    die(f"after {half} of its {step.words} LL lines")


def die(note: str) -> None:
    print(f"victim {os.getpid()}: exiting {note}", flush=True)
    sys.stdout.flush()
    os._exit(0)


def _counted(run, counts=lambda step: True):
    def wrapper(self, *args, **kwargs):
        if Exit.at is not None and counts(self):
            if Exit.steps == Exit.at:
                if Exit.torn:
                    store_half_then_die(self)
                if Exit.stop:
                    print(f"victim {os.getpid()}: stopping before its one-shot step {Exit.steps}", flush=True)
                    os.kill(os.getpid(), signal.SIGSTOP)  # until every survivor has timed out
                die(f"before its one-shot step {Exit.steps} ({self.name})")
            Exit.steps += 1
        return run(self, *args, **kwargs)

    return wrapper


for _step in (LLStep, WindowStep, Release, OpenOutput, WriteShares):
    _step.run = _counted(_step.run)
LLStep._store = _counted(LLStep._store, lambda step: step.stores_first)  # a write alone is counted by its run()


def die_at_setup_exchange(what: str) -> None:
    """Make this rank exit when its windows' setup reaches the exchange ``what``."""
    exchange = window._exchange

    def exchange_or_die(mpi_comm, uid, value, step, *args):
        if step == what:
            die(f"at the window setup's exchange {what!r}")
        return exchange(mpi_comm, uid, value, step, *args)

    window._exchange = exchange_or_die


# -- one collective --------------------------------------------------------------------------------------------------


def values(rank: int, size: int) -> np.ndarray:
    return (np.arange(size) + 1000 * rank + 1).astype(np.int32)


def collective(comm, case: Case, root: int):
    """This rank's buffers for ``case``: ``(call, out, expected)``; ``call(async_op)`` runs the collective."""
    n, r, count = comm.size, comm.rank, case.count
    size = count * n if case.collective in ("all_to_all", "reduce_scatter") else count
    lending = case.path in ("registered", "lent_by_victim", "written")
    registered = comm.alloc(size, np.int32) if lending else None  # collective: every rank takes one
    lends = case.path in ("registered", "written") or (case.path == "lent_by_victim" and r == case.victim % n)
    send = registered if lends else np.empty(size, np.int32)
    send[:] = values(r, size)
    out_size = count * n if case.collective in ("all_gather", "all_to_all") else count
    out = comm.alloc(out_size, np.int32) if case.path == "written" else np.empty(out_size, np.int32)
    out[:] = -7
    name = case.collective
    if name == "all_reduce":
        expected = sum(values(p, count) for p in range(n))
    elif name == "all_gather":
        expected = np.concatenate([values(p, count) for p in range(n)])
    elif name == "all_to_all":
        expected = np.concatenate([values(p, size)[r * count : (r + 1) * count] for p in range(n)])
    elif name == "reduce_scatter":
        expected = sum(values(p, size)[r * count : (r + 1) * count] for p in range(n))
    else:
        expected = values(root, count)
    kwargs = {"root": root} if name == "broadcast" else {}

    def call(async_op: bool = False):
        return getattr(comm, name)(send, out, algo="direct", async_op=async_op, **kwargs)

    return call, out, expected


def own_names(pid: int) -> list[str]:
    return glob.glob(f"/dev/shm/nbcoll_{pid}_*")


def ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("X", "Z")
    except OSError:
        return True


def run_case(sub: MPI.Comm, label: str, case: Case) -> str:
    """Run ``case`` on ``sub``; the victim exits (or stops), a survivor returns what it saw."""
    config = dataclasses.replace(CommConfig.from_env(), buffsize=buffsize_for_windows(sub.Get_size()),
                                 cma_bytes=8 if case.path == "by_address" else 0)  # fmt: skip
    comm = init(sub, dataclasses.replace(config, timeout=STOPPED_TIMEOUT) if case.stop else config)
    me, n, timeout = comm.rank, comm.size, comm.config.timeout
    victim = case.victim % n
    pids = sub.allgather(os.getpid())
    if case.point == -2:  # the windows exist; the registration that follows is the victim's to miss
        staged = Case(case.collective, "staged", case.count, 0)
        call, _, expected = collective(comm, staged, root=victim)
        assert np.array_equal(call(), expected), f"{label}: the fault-free call is wrong"
        if me == victim:
            die("before comm.alloc")
    start = time.monotonic()
    try:
        call, out, expected = collective(comm, case, root=victim if case.root < 0 else case.root % n)
    except CommPeerLostError as err:
        return lost(comm, label, case, err, time.monotonic() - start)
    if case.warm:
        assert np.array_equal(call(), expected), f"{label}: the fault-free call is wrong"
        out[:] = -7
    sub.Barrier()
    if me == victim:
        if case.point < 0:
            die("before the collective")
        if case.in_setup:
            die_at_setup_exchange(case.in_setup)
        Exit.arm(case)
        result = call(case.async_op)
        if case.async_op:
            result.wait()
        die("after the collective")
    start = time.monotonic()
    try:
        if case.async_op:
            work = call(async_op=True)
            work.wait(timeout=timeout + 5)
        else:
            result = call()
    except CommPeerLostError as err:
        if case.async_op:
            assert work.is_completed() and np.all(out == -7), f"rank {me}: {label}: output touched: {out}"
        return lost(comm, label, case, err, time.monotonic() - start)
    except CommTimeoutError as err:
        elapsed, text = time.monotonic() - start, str(err)
        late = re.search(rf"ranks \[[^\]]*\b{victim}\b[^\]]*\]", text)
        missing = [w for w in [f"rank {me}", "NBCOLL_TIMEOUT", *(case.says or [case.collective])] if w not in text]
        assert late and not missing, f"rank {me}: {label}: the error lacks {missing} or rank {victim}:\n{text}"
        assert case.expect == "timeout", f"rank {me}: {label}: expected {case.expect}, got\n{text}"
        assert timeout <= elapsed < timeout + 5, f"rank {me}: {label}: timed out after {elapsed:.2f} s"
        survivors = sub.Create_group(sub.Get_group().Excl([victim]), tag=14)
        survivors.Barrier()  # every survivor has timed out: the stopped victim may go on, and exit
        if survivors.Get_rank() == 0:
            os.kill(pids[victim], signal.SIGCONT)  # not SIGKILL: mpiexec ends the whole job when a rank is killed
        survivors.Free()
        return finish(comm, label, f"CommTimeoutError: {text.splitlines()[0][:150]}", elapsed)
    elapsed = time.monotonic() - start
    assert case.expect == "done", f"rank {me}: {label}: returned without the dead rank {victim}"
    assert np.array_equal(result if not case.async_op else out, expected), f"rank {me}: {label}: wrong: {out}"
    return finish(comm, label, "done", elapsed)


def lost(comm, label: str, case: Case, err: CommPeerLostError, elapsed: float) -> str:
    """Check a survivor's CommPeerLostError: it names this rank, the victim and the collective, and came at once."""
    me, text = comm.rank, str(err)
    words = [f"rank {me}", f"peer rank {case.victim % comm.size}", *(case.says or [case.collective])]
    missing = [w for w in words if w not in text]
    assert not missing, f"rank {me}: {label}: the error lacks {missing}:\n{text}"
    assert case.expect == "lost", f"rank {me}: {label}: expected {case.expect}, got\n{text}"
    assert elapsed < comm.config.timeout / 2, f"rank {me}: {label}: the dead peer was noticed after {elapsed:.2f} s"
    return finish(comm, label, f"CommPeerLostError: {text.splitlines()[0][:150]}", elapsed)


def finish(comm, label: str, outcome: str, elapsed: float) -> str:
    comm.destroy()
    assert not own_names(os.getpid()), f"rank {comm.rank}: {label}: left {own_names(os.getpid())}"
    return f"{outcome} after {elapsed:.2f} s"


def run_stage(world: MPI.Comm, stage: str) -> MPI.Comm:
    """Deal the live ranks out to the stage's cases, run them side by side; return the survivors' world."""
    pids = world.allgather(os.getpid())
    me, placed, victims, mine = world.Get_rank(), 0, [], None
    for index, entry in enumerate(stage.split("+")):
        name, n = entry.split("@")
        case, n = CASES[name], int(n)
        assert placed + n <= world.Get_size(), f"stage {stage}: {world.Get_size()} ranks are too few"
        victims.append(placed + case.victim % n)
        if placed <= me < placed + n:
            mine = (index, f"case {name} n={n}", case)
        placed += n
    sub = world.Split(MPI.UNDEFINED if mine is None else mine[0], me)
    if mine is not None:
        outcome = run_case(sub, mine[1], mine[2])
        print(f"{mine[1]} rank {sub.Get_rank()}: {outcome}", flush=True)
        sub.Free()
    for victim in victims:
        deadline = time.monotonic() + 30
        while not ended(pids[victim]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ended(pids[victim]), f"stage {stage}: the victim (pid {pids[victim]}) is still running"
    survivors = world.Create_group(world.Get_group().Excl(victims), tag=13)
    survivors.Barrier()  # every case of the stage is over: a victim's names went with it, or with its survivors
    left = [name for victim in victims for name in own_names(pids[victim])]
    assert not left, f"stage {stage}: the dead victims left {left}"
    return survivors


def load_streaming_loops() -> None:
    """Load the compiled streaming copies now, when a run streams (``NBCOLL_STREAM_BYTES`` or
    ``NBCOLL_STREAM_SHARED_BYTES`` set): each process pays Numba's start-up at its first streamed copy, and with
    up to 18 ranks on two cores that alone would outlast a case's timeout of 1.5 s."""
    if "NBCOLL_STREAM_BYTES" in os.environ or "NBCOLL_STREAM_SHARED_BYTES" in os.environ:
        from nbcoll.kernels import ll_host, stream_copy

        if stream_copy.available():
            stream_copy.copy(np.zeros(64, np.uint8), np.ones(64, np.uint8))
            ll_host.stream_store(np.zeros(2, np.uint64), np.ones(2, np.uint32), ll_kernels.flag_of(1))


def main() -> None:
    world = MPI.COMM_WORLD
    load_streaming_loops()
    for stage in sys.argv[1:]:
        world = run_stage(world, stage)
    print("direct deaths ok", flush=True)
    atexit.register(os._exit, 0)  # MPI_Finalize would wait for the ranks that are gone


if __name__ == "__main__":
    main()
