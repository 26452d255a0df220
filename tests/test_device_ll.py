"""The LL protocol on the device (nbcoll.comm.device.ll) and its one-shot kernels (nbcoll.comm.algorithms.ll_device).

The kernels are launched through Numba directly, so these tests run on the device backend this process has: the
simulator here (ranks are groups of 4 threads of one block, which the simulator runs as Python threads side by
side), a GPU where there is one (groups of 32 threads).
"""

import threading

import numpy as np
import pytest
from device_helpers import compile_ptxs, finishes_within, lines_in_loops, world
from numba import cuda

from nbcoll.backend import device_backend
from nbcoll.comm.algorithms import ll_device as ld
from nbcoll.comm.algorithms import ring_device as rd
from nbcoll.comm.device import prims as dp
from nbcoll.comm.device.ll import lines_reference
from nbcoll.comm.errors import CommAbortedError
from nbcoll.simulated_blocks import independent_threads

GROUP = 32 if device_backend() == "cuda" else 4
DTYPES = [np.float32, np.int32, np.float64, np.int64]
COUNTS = [0, 1, 5, 37]


def _sent_lines(ll: ld.DeviceLL, reader: int, writer: int, n: int) -> np.ndarray:
    """The first ``n`` lines ``writer`` sent ``reader``."""
    at = (reader * ll.nranks + writer) * ll.capacity
    return ll.lines.copy_to_host()[at : at + n]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_all_reduce_and_all_gather_equal_their_references_call_after_call(nranks, dtype):
    # One DeviceLL for every count and both collectives: each call a new round in the same lines, never cleared.
    ll = ld.DeviceLL(nranks, max_bytes=37 * 8, group_threads=GROUP)
    for count in COUNTS:
        x = world(nranks, count, dtype, seed=nranks * 100 + count, low=-1000, high=1000)
        reduced = ll.all_reduce(x.copy())
        # The reference folds in rank order, as every rank does, so even float sums agree to the bit ...
        np.testing.assert_array_equal(reduced, ld.all_reduce_reference(x))
        np.testing.assert_allclose(reduced[0], x.astype(np.float64).sum(axis=0), rtol=1e-5)  # ... and are sums
        np.testing.assert_array_equal(ll.all_gather(x), ld.all_gather_reference(x))
    assert ll.rounds == 2 * len(COUNTS)


@pytest.mark.parametrize("op", ["prod", "max", "min"])
def test_every_op_out_of_place(op):
    ll = ld.DeviceLL(3, max_bytes=256, group_threads=GROUP)
    for dtype in (np.float32, np.int32):
        x = world(3, 37, dtype, seed=7)
        out = np.zeros_like(x)
        ll.all_reduce(x, out, op=op)
        np.testing.assert_array_equal(out, ld.all_reduce_reference(x, op))
        np.testing.assert_array_equal(x, world(3, 37, dtype, seed=7))  # the input is untouched


def test_values_cross_as_their_bits_not_as_numbers():
    # NaN payloads, -0.0, infinities, subnormals and the int extremes: a conversion through arithmetic would
    # change some of them; a bit cast keeps every one, in one line (4 bytes) or two (8 bytes, low word first).
    specials = {
        np.float32: np.array([np.nan, -0.0, np.inf, -np.inf, 1e-45, 3.4e38, -1.5], np.float32),
        np.int32: np.array([-(2**31), 2**31 - 1, -1, 0, 1, -2, 12345], np.int32),
        np.float64: np.array([np.nan, -0.0, np.inf, -np.inf, 5e-324, 1.7e308, -1.5]),
        np.int64: np.array([-(2**63), 2**63 - 1, -1, 0, 1, -(2**32), 2**32 + 7], np.int64),
    }
    specials[np.float32][0] = np.uint32(0x7FC00ABC).view(np.float32)  # a NaN with a payload
    ll = ld.DeviceLL(2, max_bytes=64, group_threads=GROUP)
    for dtype, values in specials.items():
        x = np.stack([values, values[::-1]])
        out = ll.all_gather(x)
        assert out.view(np.uint8).tobytes() == ld.all_gather_reference(x).view(np.uint8).tobytes(), dtype
        # what rank 0 sent rank 1: the line format of the host LL, flag high, data low
        np.testing.assert_array_equal(_sent_lines(ll, 1, 0, values.nbytes // 4), lines_reference(values, ll.rounds))


def test_consecutive_calls_carry_new_flags_and_the_lines_are_never_cleared():
    ll = ld.DeviceLL(3, max_bytes=64, group_threads=GROUP)
    for call in range(1, 5):
        x = world(3, 5, np.int32, seed=call, low=-100, high=100)
        np.testing.assert_array_equal(ll.all_reduce(x.copy()), ld.all_reduce_reference(x))
        assert ll.rounds == call
        for reader, writer in [(0, 1), (1, 2), (2, 0)]:  # every line of the call carries its flag and its word
            np.testing.assert_array_equal(_sent_lines(ll, reader, writer, 5), lines_reference(x[writer], call))
    # A shorter call leaves the lines past its count as the last call wrote them: nobody reads those.
    ll.all_reduce(world(3, 2, np.int32, seed=9))
    assert (_sent_lines(ll, 0, 1, 5) >> np.uint64(32)).tolist() == [5, 5, 4, 4, 4]


def launch_then_abort(ll, collective, d, out, ranks_started):
    """Launch with some ranks missing, and set the abort word once the ranks that run have had a second to write
    their lines and read each other's: then the only peer any of them still waits for is a missing one (an abort
    set before the launch could stop a rank before a slow live peer had written, and name that peer)."""
    timer = threading.Timer(1.0, ll.abort)
    timer.start()
    try:
        return finishes_within(20, lambda: ll.launch(collective, d, out, spins_before_check=50,
                                                     ranks_started=ranks_started))  # fmt: skip
    finally:
        timer.cancel()


def test_a_call_after_a_complete_one_never_reads_its_stale_lines():
    # Round 1 fills every inbox. In round 2 rank 2 never comes: its round-1 lines are still there, with the same
    # count and dtype, and only their flag says they are old. The others must give up, not sum round 1's data.
    ll = ld.DeviceLL(3, max_bytes=64, group_threads=GROUP)
    x = world(3, 5, np.int64, seed=1, low=-100, high=100)
    ll.all_reduce(x.copy())
    d = cuda.to_device(x)
    status = launch_then_abort(ll, "all_reduce", d, d, ranks_started=2)
    assert status.tolist() == [[dp.ABORTED_RECV, 2], [dp.ABORTED_RECV, 2], [dp.RUNNING, 3]]


@pytest.mark.parametrize("collective", ld.COLLECTIVES)
def test_a_rank_that_never_writes_leaves_the_others_failing_in_bounded_time(collective):
    ll = ld.DeviceLL(4, max_bytes=64, group_threads=GROUP)
    x = world(4, 9, np.float32)
    d, out = cuda.to_device(x), cuda.device_array((4, 9 if collective == "all_reduce" else 36), np.float32)
    status = launch_then_abort(ll, collective, d, out, ranks_started=3)
    assert status.tolist() == [[dp.ABORTED_RECV, 3]] * 3 + [[dp.RUNNING, 4]]
    with pytest.raises(CommAbortedError, match=rf"{collective} \(ll, device\).*rank 0 waited for the lines of rank 3.*"
                                               r"rank 3 never ran"):  # fmt: skip
        ld.raise_for_status(status, collective)
    assert ll.rounds == 1  # the failed call took its round: the next one cannot mistake these lines for its own


def test_the_host_setting_the_abort_word_stops_a_kernel_that_is_already_polling():
    ll = ld.DeviceLL(2, max_bytes=64, group_threads=GROUP)
    d = cuda.to_device(world(2, 9, np.float32))
    timer = threading.Timer(0.3, ll.abort)
    timer.start()
    try:  # rank 1 never comes
        status = finishes_within(20, lambda: ll.launch("all_gather", d, cuda.device_array((2, 18), np.float32),
                                                       spins_before_check=100, ranks_started=1))  # fmt: skip
    finally:
        timer.cancel()
    assert status.tolist() == [[dp.ABORTED_RECV, 1], [dp.RUNNING, 2]]


def test_flags_past_two_to_the_31_and_the_wrap_to_1():
    # Flags are 32 bits: 2**31 and above must reach the lines unsigned (not as a negative int32 sign-extended into
    # the data half), and after 2**32 - 1 the next flag is 1, as the host LL's (kernels.ll.wrapped).
    ll = ld.DeviceLL(2, max_bytes=16, group_threads=GROUP)
    ll.rounds = 2**31 - 2
    for flag in (2**31 - 1, 2**31, 2**31 + 1):
        x = world(2, 3, np.int32, seed=flag, low=-100, high=100)
        np.testing.assert_array_equal(ll.all_reduce(x.copy()), ld.all_reduce_reference(x))
        np.testing.assert_array_equal(_sent_lines(ll, 0, 1, 3), lines_reference(x[1], flag))
    ll.rounds = 2**32 - 2
    for flag in (2**32 - 1, 1, 2):
        x = world(2, 3, np.float32, seed=flag)
        np.testing.assert_array_equal(ll.all_reduce(x.copy()), ld.all_reduce_reference(x))
        np.testing.assert_array_equal(_sent_lines(ll, 1, 0, 3), lines_reference(x[0], flag))


def test_the_wrap_never_makes_flag_0_which_every_line_never_written_carries():
    # A fresh inbox is all zeros. Round 2**32 is flag 1, not 0: a peer that never writes is waited for, not read.
    ll = ld.DeviceLL(2, max_bytes=16, group_threads=GROUP)
    ll.rounds = 2**32 - 1
    ll.abort()
    d = cuda.to_device(world(2, 3, np.int32))
    status = finishes_within(20, lambda: ll.launch("all_reduce", d, d, spins_before_check=50, ranks_started=1))
    assert status.tolist() == [[dp.ABORTED_RECV, 1], [dp.RUNNING, 2]]


def test_the_simulator_runs_the_polling_kernels_with_real_threads():
    # A thread that polls a line another thread writes must not run alone, one thread after another (the
    # simulator's shortcut for kernels whose threads never wait for each other): it would spin forever.
    assert not independent_threads(ld.ll_all_reduce_kernel.py_func)
    assert not independent_threads(ld.ll_all_gather_kernel.py_func)
    assert not independent_threads(rd.ring_all_reduce_kernel.py_func)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="nranks, group_threads: expected nranks >= 1"):
        ld.DeviceLL(0)
    with pytest.raises(ValueError, match="nranks, group_threads: .* got 300 and 4"):
        ld.DeviceLL(300, group_threads=4)
    with pytest.raises(ValueError, match="max_bytes: expected at least 4 bytes"):
        ld.DeviceLL(2, max_bytes=3)
    ll = ld.DeviceLL(2, max_bytes=16, group_threads=GROUP)
    with pytest.raises(ValueError, match="op: expected one of sum, prod, max, min"):
        ll.all_reduce(np.ones((2, 3), np.float32), op="avg")
    with pytest.raises(ValueError, match=r"local: expected an array of shape \(2, count\)"):
        ll.all_reduce(np.ones((3, 3), np.float32))
    with pytest.raises(ValueError, match="local: expected one of float32"):
        ll.all_gather(np.ones((2, 3), np.int8))
    with pytest.raises(ValueError, match=r"local: expected at most 16 bytes per rank \(max_bytes\), got 3 x float64"):
        ll.all_reduce(np.ones((2, 3)))
    d = cuda.to_device(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"out: expected shape \(2, 6\) and dtype float32"):
        ll.launch("all_gather", d, d)
    with pytest.raises(ValueError, match="collective: expected one of all_reduce, all_gather"):
        ll.launch("broadcast", d, d)
    with pytest.raises(ValueError, match="flag: expected a 32-bit round flag"):
        lines_reference(np.ones(2, np.float32), 0)


def test_the_kernels_compile_for_sm90_with_volatile_polls_in_loops_and_one_64_bit_store_per_line():
    kernels = {"ll_all_reduce_kernel": True, "ll_all_gather_kernel": False}
    for dtype in ("float32", "float64"):  # one line per value, and two (int32: the suite's PTX test compiles it)
        for name, reduce in kernels.items():
            ptx = compile_ptxs(ld.__name__, [name], ld._signature(dtype, reduce))[name]
            where = (name, dtype)
            # The poll: a volatile 64-bit load of the line, inside its spin loop, and the abort word's load too.
            loads, in_loops = lines_in_loops(ptx, r"ld\.volatile\.global\.u64")
            assert loads >= 1 and in_loops == loads, where
            aborts, in_loops = lines_in_loops(ptx, r"ld\.volatile\.global\.u32")
            assert aborts >= 1 and in_loops == aborts, where
            # The line: every volatile store is one 64-bit store (flag and data together), none of 32 bits or a
            # vector of halves; and no fence, which LL does not need.
            stores = [line for line in ptx.splitlines() if "st.volatile" in line]
            assert stores and all("st.volatile.global.u64" in line for line in stores), where
            assert "membar" not in ptx and "fence." not in ptx and "barrier.sync" not in ptx, where
