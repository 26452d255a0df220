"""The ring all-reduce as one kernel (nbcoll.comm.algorithms.ring_device) on its device primitives.

The kernel is launched through Numba directly, never through nbcoll's backend switch, so these tests run on the
device backend this process has: the simulator here (ranks are groups of 4 threads of one block, which the
simulator runs as Python threads side by side), a GPU where there is one (groups of 32 threads).
"""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from numba import cuda

import nbcoll
from nbcoll.backend import device_backend
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.algorithms import ring_device as rd
from nbcoll.comm.device import prims as dp
from nbcoll.comm.errors import CommAbortedError

GROUP = 32 if device_backend() == "cuda" else 4
DTYPES = [np.float32, np.float64, np.int32, np.int64]


def _world(nranks: int, count: int, dtype, seed: int = 0, low: int = -3, high: int = 4) -> np.ndarray:
    """Each rank's input: small integers (exact under every op), or floats with a fractional part."""
    rng = np.random.default_rng(seed)
    x = rng.integers(low, high, size=(nranks, count))
    if np.issubdtype(dtype, np.floating):
        x = x + rng.random((nranks, count))
    return x.astype(dtype)


def _check(x: np.ndarray, out: np.ndarray, op: str, slot_elems: int, nchannels: int = 1) -> None:
    expected = rd.all_reduce_reference(x, op, slot_elems, nchannels)
    # The reference adds in the ring's order, so even float results agree to the bit ...
    np.testing.assert_array_equal(out, expected)
    # ... and the reference itself is the all-reduce: every row is op over the ranks, within rounding.
    fold = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op]
    plain = np.broadcast_to(fold(x.astype(np.float64), axis=0), x.shape)
    np.testing.assert_allclose(expected.astype(np.float64), plain, rtol=1e-5 if x.dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("count", [0, 1, 5, 37])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_the_kernel_sums_exactly_as_the_ring_schedule_does(nranks, count, dtype):
    ring = rd.DeviceRing(nranks, slot_elems=8, steps=2, group_threads=GROUP)
    x = _world(nranks, count, dtype, seed=nranks * 100 + count)
    out = ring.all_reduce(x.copy())
    _check(x, out, "sum", slot_elems=8)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("op", ["prod", "max", "min"])
def test_every_op_and_dtype_out_of_place(op, dtype):
    ring = rd.DeviceRing(3, slot_elems=4, steps=2, group_threads=GROUP)
    x = _world(3, 37, dtype, seed=7)
    out = np.zeros_like(x)
    ring.all_reduce(x, out, op=op)
    _check(x, out, op, slot_elems=4)
    np.testing.assert_array_equal(x, _world(3, 37, dtype, seed=7))  # the input is untouched


def test_the_kernel_equals_the_host_stepped_ring_to_the_bit():
    # The host's ring all-reduce (nbcoll.comm.algorithms.ring) in chunks of 16 bytes, as the kernel's 4-element
    # slots: the same schedule, so the same float32 sums, on every rank.
    x = _world(3, 37, np.float32, seed=11)

    def host_ring(comm):
        mine = x[comm.rank].copy()
        comm.all_reduce(mine, algo="ring")
        return mine

    with nbcoll.use_backend("numpy"):
        host = loopback.run(3, host_ring, config=CommConfig(buffsize=64, steps=4, nchannels=1, timeout=60.0))
    out = rd.DeviceRing(3, slot_elems=4, steps=4, group_threads=GROUP).all_reduce(x.copy())
    np.testing.assert_array_equal(out, np.stack(host))


def test_many_fifo_rounds_through_a_tiny_slot_and_two_channels():
    # 37 elements, 4 ranks, 2-element slots in a 2-slot FIFO: each channel's part takes 3 rounds of 7 steps.
    ring = rd.DeviceRing(4, slot_elems=2, steps=2, nchannels=2, group_threads=GROUP)
    x = _world(4, 37, np.int64, seed=3, low=-1000, high=1000)
    status = ring.launch(d := cuda.to_device(x), d)
    assert (status[:, :, 0] == dp.OK).all(), status
    assert (status[:, :, 1] == 3 * (2 * 4 - 1)).all(), status  # every rank ran 3 rounds of 2n - 1 primitives
    _check(x, d.copy_to_host(), "sum", slot_elems=2, nchannels=2)


def test_the_counters_are_never_reset_so_the_next_call_carries_on():
    ring = rd.DeviceRing(3, slot_elems=4, steps=2, group_threads=GROUP)
    x, y = _world(3, 11, np.int32, seed=1), _world(3, 5, np.float64, seed=2)
    _check(x, ring.all_reduce(x.copy()), "sum", 4)
    after_one = ring.tail.copy_to_host().copy()
    _check(y, ring.all_reduce(y.copy()), "sum", 4)  # another dtype, the same counters
    _check(x, ring.all_reduce(x.copy(), op="max"), "max", 4)
    tail, head = ring.tail.copy_to_host(), ring.head.copy_to_host()
    assert (tail[:: dp.COUNTER_STRIDE] > after_one[:: dp.COUNTER_STRIDE]).all()
    np.testing.assert_array_equal(tail, head)  # every chunk posted was consumed
    # 11 elements in rounds of 12: one round of 2(n-1) = 4 sends per rank; 5 elements: one more; then 11 again.
    np.testing.assert_array_equal(tail[:: dp.COUNTER_STRIDE], [12, 12, 12])


def _launch_within(seconds: float, ring, x, **kwargs) -> np.ndarray:
    """``ring.launch(x, x, **kwargs)`` in a thread, so that a kernel that spins forever fails the test, not the run."""
    result = []
    worker = threading.Thread(target=lambda: result.append(ring.launch(x, x, **kwargs)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"the kernel still spins after {seconds} s with the abort word set"
    return result[0]


def test_a_rank_that_never_starts_leaves_the_others_aborting_not_spinning():
    ring = rd.DeviceRing(3, slot_elems=4, steps=2, group_threads=GROUP)
    ring.abort()  # the host has given up already; each spin reads the word every 50 spins
    x = cuda.to_device(_world(3, 37, np.int64))
    status = _launch_within(20, ring, x, spins_before_check=50, ranks_started=2)
    # Rank 0 waited for rank 2's chunk at its second step, so rank 1 for rank 0's at its third.
    assert status[0].tolist() == [[dp.ABORTED_RECV, 2], [dp.ABORTED_RECV, 3], [dp.RUNNING, -1]]
    with pytest.raises(CommAbortedError, match=r"rank 0 \(channel 0\) waited for .* \(rank 2\) at step 2.*never ran"):
        rd.raise_for_status(status)


def test_the_host_setting_the_abort_word_stops_a_kernel_that_is_already_spinning():
    ring = rd.DeviceRing(2, slot_elems=4, steps=2, group_threads=GROUP)
    x = cuda.to_device(_world(2, 9, np.float32))
    timer = threading.Timer(0.3, ring.abort)
    timer.start()
    try:
        status = _launch_within(20, ring, x, spins_before_check=100, ranks_started=1)  # rank 1 never comes
    finally:
        timer.cancel()
    assert status[0, 0, 0] == dp.ABORTED_RECV and status[0, 1, 0] == dp.RUNNING, status


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="nranks: expected 1 to 15"):
        rd.DeviceRing(16)
    with pytest.raises(ValueError, match="slot_elems: expected a positive integer"):
        rd.DeviceRing(2, slot_elems=0)
    with pytest.raises(ValueError, match="scope: expected one of gpu, system"):
        rd.DeviceRing(2, scope="node", group_threads=GROUP)
    ring = rd.DeviceRing(2, slot_elems=4, group_threads=GROUP)
    with pytest.raises(ValueError, match="op: expected one of sum, prod, max, min"):
        ring.all_reduce(np.ones((2, 3)), op="avg")
    with pytest.raises(ValueError, match=r"local, out: expected two arrays of shape \(2, count\)"):
        ring.all_reduce(np.ones((3, 3)))
    with pytest.raises(ValueError, match="local: expected one of float32"):
        ring.all_reduce(np.ones((2, 3), np.int8))


_PTX_CHECK = """
import re
import numba.cuda.dispatcher as dispatcher

class Device:  # no GPU here: a kernel that calls device functions asks the driver for one
    compute_capability = (9, 0)

dispatcher.get_current_device = lambda: Device()
from numba import cuda
from nbcoll.comm.algorithms import ring_device as rd

ptx, _ = cuda.compile_ptx(rd.ring_all_reduce_kernel.py_func, rd._signature("float32"), cc=(9, 0))
lines = ptx.splitlines()
labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\\$L__\\w+):", line))}
back_edges = [(labels[m.group(1)], i) for i, line in enumerate(lines)
              if (m := re.search(r"\\bbra(?:\\.uni)?\\s+(\\$L__\\w+);", line)) and labels.get(m.group(1), i) < i]
loads = [i for i, line in enumerate(lines) if "ld.volatile.global" in line]
in_loops = [i for i in loads if any(top < i < bottom for top, bottom in back_edges)]
print("loads", len(loads), "in_loops", len(in_loops))
print("named_barriers", ptx.count("barrier.sync"), "membar.gl", ptx.count("membar.gl"),
      "membar.sys", ptx.count("membar.sys"), "st.volatile", ptx.count("st.volatile.global"))
"""


def test_the_kernel_compiles_for_sm90_and_its_spins_load_volatile_inside_loops():
    # A subprocess: the simulator and compile_ptx cannot share a process.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = "cuda"
    code = textwrap.dedent(_PTX_CHECK)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    words = proc.stdout.split()
    counts = {name: int(value) for name, value in zip(words[::2], words[1::2], strict=True)}
    # Every primitive of the ring spins on a counter (and every few spins on the abort word): each in a loop.
    assert counts["loads"] >= 5 and counts["in_loops"] >= 5, proc.stdout
    assert counts["named_barriers"] >= 2 and counts["st.volatile"] >= 2, proc.stdout
    assert counts["membar.gl"] >= 1 and counts["membar.sys"] >= 1, proc.stdout  # both scopes, chosen at run time
