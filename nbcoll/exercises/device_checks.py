"""The check of the device-primitive exercise: the learner's ``recv_reduce_send`` inside the ring all-reduce kernel.

The seam: :func:`nbcoll.comm.device.ring_launch.ring_kernel_with` compiles the landed ring kernel
(:mod:`nbcoll.comm.algorithms.ring_device`) from its own body with ``dp.recv_reduce_send`` bound to the learner's
device function, so the learner's primitive runs in the real schedule, between the landed ``send``,
``recv_reduce_copy_send`` and the rest. Each case runs it on 2 to 4 ranks (groups of threads of one simulated
block) and compares every rank's row with :func:`~nbcoll.comm.algorithms.ring_device.all_reduce_reference`, the
counters with the steps the schedule posts, and the status with "every rank finished". A watchdog sets the abort
word when the counters stop moving, so a primitive that waits for the wrong step fails its case instead of
spinning forever.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from nbcoll.backend import device_backend
from nbcoll.exercises.report import Report, exit_text, first_difference

STALL_SECONDS = 5.0
"""How long the counters may stand still on the simulator before the watchdog sets the abort word (a simulated
step takes well under a second)."""

CASES = (
    # ranks, elements, slot elements, FIFO slots, dtype
    (3, 5, 4, 2, np.int64),
    (3, 13, 2, 2, np.int32),  # 3 rounds through a 2-slot FIFO: slots are reused, counters carry on
    (4, 37, 2, 2, np.int64),  # 5 rounds, every block size
    (4, 1, 4, 2, np.float32),
    (3, 0, 4, 2, np.float64),
    (2, 9, 2, 2, np.int64),  # two ranks have no recv_reduce_send: the rest of the ring must still be right
)


PTX_SIGNATURE = (
    "void(Tuple((float32[:, :, :, ::1], int64[::1], int64[::1], int32[::1], int32[::1], int64[::1], "
    "UniTuple(int64, 9))), float32[:, ::1], float32[:, ::1], int64, int64)"
)
"""The learner's function compiled alone, as a kernel of the primitives' tuple ``(fifo, tail, head, abort, sync,
state, ids)`` and ``(local, out, lo, hi)``: its spins and barriers compile as they do inside the ring."""


def _inputs(nranks: int, count: int, dtype: Any) -> np.ndarray:
    """Each rank's row: rank r's elements say which ranks a sum holds (10**r, folded into a small range)."""
    x = np.arange(count)[None, :] % 5 + 10 ** np.arange(nranks)[:, None]
    return x.astype(dtype)


def _watch(ring: Any, done: threading.Event) -> None:
    """Set ``ring``'s abort word once its counters stand still for :data:`STALL_SECONDS` (on a GPU, where the
    counters cannot be read while the kernel runs, once a minute has passed)."""
    on_sim = device_backend() == "sim"
    limit = STALL_SECONDS if on_sim else 60.0  # a GPU's first launch compiles the kernel: seconds, not a stall
    last, since = None, time.monotonic()
    while not done.wait(0.2):
        now = (ring.tail.copy_to_host().tobytes(), ring.head.copy_to_host().tobytes()) if on_sim else None
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > limit:
            ring.abort()
            return


def check_recv_reduce_send(report: Report, recv_reduce_send: Any) -> None:
    from numba import cuda

    from nbcoll.comm.algorithms import ring_device as rd
    from nbcoll.comm.device import prims as dp
    from nbcoll.comm.device import ring_launch

    kernel = ring_launch.ring_kernel_with(recv_reduce_send)
    group = 32 if device_backend() == "cuda" else 4
    spins = 50 if device_backend() == "sim" else dp.SPINS_BEFORE_CHECK_ABORT
    report.plan([_case_name(*case) for case in CASES])
    for nranks, count, slot, steps, dtype in CASES:
        case = _case_name(nranks, count, slot, steps, dtype)
        ring = rd.DeviceRing(nranks, slot_elems=slot, steps=steps, group_threads=group)
        x = _inputs(nranks, count, dtype)
        local, out, status = cuda.to_device(x), cuda.to_device(np.zeros_like(x)), ring_launch.new_status(ring)
        done = threading.Event()
        watchdog = threading.Thread(target=_watch, args=(ring, done), daemon=True)
        watchdog.start()
        try:
            args = (ring, local, out, status)
            ran = _launch(report, case, lambda: ring_launch.enqueue(*args, spins_before_check=spins, kernel=kernel))  # noqa: B023
        finally:
            done.set()
            watchdog.join()
        if not ran:
            return
        if not _finished(report, case, status.copy_to_host(), nranks):
            return
        rounds = -(-count // (nranks * slot)) if nranks > 1 else 0
        posted = rounds * 2 * (nranks - 1)
        tail, head = ring.tail.copy_to_host()[:: dp.COUNTER_STRIDE], ring.head.copy_to_host()[:: dp.COUNTER_STRIDE]
        if (tail != posted).any() or (head != posted).any():
            report.add(case, False, f"the counters are not the schedule's: each FIFO's tail is "
                       f"{tail.tolist()} and head {head.tolist()}, where the schedule posts {posted} steps into each "
                       "(2(n-1) a round)\nhint: post tail of nxt = sent + 1 and head of this rank = received + 1 once "
                       "a step, then state[dp.SENT] = sent + 1 and state[dp.RECEIVED] = received + 1")  # fmt: skip
            return
        got, expected = out.copy_to_host(), rd.all_reduce_reference(x, "sum", slot)
        difference = first_difference(expected, got, 1e-5, 1e-6)
        if difference:
            report.add(case, False, f"input: rank r holds 10**r + i % 5 (one row per rank)\n{difference}\nhint: "
                       "each element sent on is op(this rank's element, the slot's element): fold in this rank's "
                       "own element, dp.apply_op(op, local[rank, lo + i], fifo[channel, rank, received % nsteps, i]), "
                       "and write it to next's slot, fifo[channel, nxt, sent % nsteps, i]")  # fmt: skip
            return
        report.add(case, True)


def _case_name(nranks: int, count: int, slot: int, steps: int, dtype: Any) -> str:
    return f"{nranks} ranks, {count} elements of {np.dtype(dtype).name}, slots of {slot}, a FIFO of {steps}"


def _launch(report: Report, case: str, launch: Any) -> bool:
    """Run ``launch()``; on an error, a failed ``case`` that says what it was."""
    report.begin(case)
    try:
        launch()
    except NotImplementedError:
        report.fail(case, "recv_reduce_send is not written yet: it raises NotImplementedError (the starter's plan "
                    "says how)")  # fmt: skip
    except SystemExit as exc:  # the learner's code may not end the check: it fails this case instead
        report.fail(case, f"the kernel exited the check during this case: it called {exit_text(exc)}")
    except Exception as exc:  # whatever the learner's function raises is shown, not propagated
        report.fail(case, f"the kernel raised {type(exc).__name__}: {exc}")
    else:
        return True
    return False


def _finished(report: Report, case: str, status: np.ndarray, nranks: int) -> bool:
    """Whether every rank finished; else a failed ``case`` saying who waited for what."""
    from nbcoll.comm.algorithms import ring_device as rd
    from nbcoll.comm.errors import CommAbortedError

    try:
        rd.raise_for_status(status)
    except CommAbortedError as error:
        report.add(case, False, f"the ring did not finish: its counters stood still for {STALL_SECONDS:g} s and the "
                   f"watchdog set the abort word.\n{error}\nhint: thread 0 waits for tail of this rank >= received + "
                   "1 and head of nxt >= sent + 1 - nsteps; after the step, it posts tail of nxt = sent + 1 and "
                   "head of this rank = received + 1, and every thread adds 1 to state[dp.SENT] and "
                   "state[dp.RECEIVED]")  # fmt: skip
        return False
    return True
