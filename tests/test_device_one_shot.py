"""One-shot and two-shot all-reduce kernels over registered buffers with signal pads
(nbcoll.comm.algorithms.direct_device on nbcoll.comm.device.signal_pads).

The kernels are launched through Numba directly, so these tests run on the device backend this process has: the
simulator here (ranks are groups of 4 threads of one block, which the simulator runs as Python threads side by
side), a GPU where there is one (groups of 32 threads).
"""

import re
import threading

import numpy as np
import pytest
from device_helpers import compile_ptxs, finishes_within, lines_in_loops, world
from numba import cuda

from nbcoll.backend import device_backend
from nbcoll.comm.algorithms import direct_device as dd
from nbcoll.comm.device import signal_pads as sp
from nbcoll.comm.errors import CommAbortedError

GROUP = 32 if device_backend() == "cuda" else 4
DTYPES = [np.float32, np.float64, np.int32, np.int64]


@pytest.fixture
def symm_memory():
    """``DeviceSymmetricMemory(...)`` whose abort word a timer sets after 30 s: a kernel that would spin forever
    returns, and its call raises, instead of hanging the run."""
    timers = []

    def make(nranks: int, **kwargs) -> dd.DeviceSymmetricMemory:
        symm = dd.DeviceSymmetricMemory(nranks, group_threads=GROUP, **kwargs)
        timers.append(threading.Timer(30, symm.abort))
        timers[-1].daemon = True
        timers[-1].start()
        return symm

    yield make
    for timer in timers:
        timer.cancel()


def _check(x: np.ndarray, out: np.ndarray, op: str, algo: str, nblocks: int = 1) -> None:
    expected = dd.REFERENCES[algo](x, op, nblocks)
    # The reference folds in the kernel's order, so even float results agree to the bit ...
    np.testing.assert_array_equal(out, expected)
    # ... and the reference itself is the all-reduce: every row is op over the ranks, within rounding.
    fold = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op]
    plain = np.broadcast_to(fold(x.astype(np.float64), axis=0), x.shape)
    if np.issubdtype(x.dtype, np.integer):
        np.testing.assert_array_equal(expected, plain.astype(x.dtype))  # integers: exact
    else:
        np.testing.assert_allclose(expected.astype(np.float64), plain, rtol=1e-5 if x.dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("algo", dd.ALGOS)
@pytest.mark.parametrize("count", [0, 1, 5, 37])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_the_kernels_sum_exactly_as_their_references(nranks, count, algo, symm_memory):
    # 37 (and 5 at 3 or 4 ranks) does not split evenly into shards: the two-shot's first shards are one larger.
    symm = symm_memory(nranks)
    for dtype in (np.int64, np.float32):
        x = world(nranks, count, dtype, seed=nranks * 100 + count)
        out = symm.all_reduce(x.copy(), algo=algo)
        _check(x, out, "sum", algo)
        assert symm.pads_clear()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("op", ["prod", "max", "min"])
def test_every_op_and_dtype_in_two_blocks(op, dtype, symm_memory):
    symm = symm_memory(3, nblocks=2)
    x = world(3, 37, dtype, seed=7)
    for algo in dd.ALGOS:
        out = np.zeros_like(x)
        symm.all_reduce(x, out, op=op, algo=algo)
        _check(x, out, op, algo, nblocks=2)
    np.testing.assert_array_equal(x, world(3, 37, dtype, seed=7))  # the input is untouched


def test_the_two_algorithms_agree_to_the_bit(symm_memory):
    # The same fold in rank order, whichever rank computes an element.
    x = world(4, 37, np.float32, seed=5, low=-1000, high=1000)
    one, two = dd.one_shot_all_reduce_reference(x), dd.two_shot_all_reduce_reference(x, nblocks=3)
    np.testing.assert_array_equal(one, two)
    symm = symm_memory(4, nblocks=3)
    np.testing.assert_array_equal(symm.all_reduce(x.copy(), algo="two_shot"), one)


def test_consecutive_calls_reuse_the_pads_without_a_reset(symm_memory):
    # Every put is taken by one wait, so each call leaves the pads at zero for the next one, as a replayed graph
    # would find them: the same device arrays, launched again, with nothing reset in between.
    symm = symm_memory(3, nblocks=2)
    x = world(3, 11, np.int32, seed=1, low=-100, high=100)
    buffers, out = cuda.to_device(x), cuda.device_array(x.shape, x.dtype)
    for _ in range(3):
        status = symm.launch(buffers, out, "one_shot")
        assert (status[:, :, 0] == sp.OK).all() and (status[:, :, 1] == 2).all(), status
        assert symm.pads_clear()
        _check(x, out.copy_to_host(), "sum", "one_shot", nblocks=2)
    y = world(3, 5, np.float64, seed=2)
    _check(y, symm.all_reduce(y.copy(), algo="two_shot"), "sum", "two_shot", nblocks=2)  # another dtype
    _check(x, symm.all_reduce(x.copy(), op="max"), "max", "one_shot", nblocks=2)
    assert symm.pads_clear()


def test_two_shot_in_place_on_the_registered_buffers(symm_memory):
    symm = symm_memory(3)
    x = world(3, 37, np.int64, seed=4, low=-1000, high=1000)
    d = cuda.to_device(x)
    for _ in range(2):  # the second call reduces the first one's result: every row already equal
        status = symm.launch(d, d, "two_shot")
        assert (status[:, :, 0] == sp.OK).all(), status
        x = dd.two_shot_all_reduce_reference(x)
        np.testing.assert_array_equal(d.copy_to_host(), x)
    assert symm.pads_clear()


@pytest.mark.parametrize("algo", dd.ALGOS)
def test_registered_buffers_given_as_a_tuple_of_arrays(algo, symm_memory):
    # One allocation per rank, as peers' buffers mapped into this process would be.
    symm = symm_memory(3)
    x = world(3, 37, np.float32, seed=9)
    buffers = tuple(cuda.to_device(row) for row in x)
    out = buffers if algo == "two_shot" else tuple(cuda.device_array(37, np.float32) for _ in range(3))
    status = symm.launch(buffers, out, algo, "min")
    assert (status[:, :, 0] == sp.OK).all(), status
    _check(x, np.stack([o.copy_to_host() for o in out]), "min", algo)
    assert symm.pads_clear()
    with pytest.raises(ValueError, match="out: the one-shot all-reduce reads every buffer"):
        symm.launch(buffers, (out[0], buffers[1], out[2]), "one_shot")


def test_a_rank_that_never_starts_leaves_the_others_aborting_not_spinning():
    for algo in dd.ALGOS:
        symm = dd.DeviceSymmetricMemory(3, group_threads=GROUP)
        symm.abort()  # the host has given up already; each spin reads the word every 50 spins
        x = world(3, 37, np.int64)
        buffers, out = cuda.to_device(x), cuda.to_device(x)
        launch = symm.launch
        status = finishes_within(20, lambda: launch(buffers, out, algo, spins_before_check=50, ranks_started=2))  # noqa: B023
        # Ranks 0 and 1 signal each other and rank 2, then wait for rank 2's signal at the first barrier.
        assert status[0].tolist() == [[sp.ABORTED_WAIT, 1, 2], [sp.ABORTED_WAIT, 1, 2], [sp.RUNNING] * 3]
        np.testing.assert_array_equal(out.copy_to_host(), x)  # nothing was written past the failed barrier
        with pytest.raises(CommAbortedError, match=r"rank 0 \(block 0\) waited for rank 2's signal at barrier 1"):
            dd.raise_for_status(status, algo)
        assert not symm.pads_clear()  # rank 2's pads hold the signals it never took ...
        symm.reset()  # ... until the host clears them, with no kernel running
        _check(x, symm.all_reduce(x.copy(), algo=algo), "sum", algo)


def test_a_signal_never_taken_stops_the_next_put():
    # A stale 1 in rank 1's pad for rank 0 (an aborted call that was not reset): rank 0's put spins on it.
    symm = dd.DeviceSymmetricMemory(2, group_threads=GROUP)
    pads = np.zeros(symm.pads.shape, np.uint32)
    pads[sp.pad_at(0, 1, 0, 2)] = 1
    symm.pads.copy_to_device(pads)
    symm.abort()
    x = cuda.to_device(world(2, 5, np.float32))
    out = cuda.device_array_like(x)
    status = finishes_within(20, lambda: symm.launch(x, out, spins_before_check=50, ranks_started=1))
    assert status[0].tolist() == [[sp.ABORTED_PUT, 1, 1], [sp.RUNNING] * 3], status
    with pytest.raises(CommAbortedError, match="rank 0 .* waited for rank 1 to take its last signal at barrier 1"):
        dd.raise_for_status(status)


def test_the_host_setting_the_abort_word_stops_a_kernel_that_is_already_spinning():
    symm = dd.DeviceSymmetricMemory(2, group_threads=GROUP)
    x = cuda.to_device(world(2, 9, np.float32))
    out = cuda.device_array_like(x)
    timer = threading.Timer(0.3, symm.abort)
    timer.start()
    try:  # rank 1 never comes
        status = finishes_within(20, lambda: symm.launch(x, out, spins_before_check=100, ranks_started=1))
    finally:
        timer.cancel()
    assert status[0, 0, 0] == sp.ABORTED_WAIT and status[0, 1, 0] == sp.RUNNING, status


def test_all_reduce_raises_and_leaves_the_pads_clear_after_an_abort(monkeypatch):
    symm = dd.DeviceSymmetricMemory(2, group_threads=GROUP)
    launch = symm.launch
    monkeypatch.setattr(symm, "launch", lambda *a: launch(*a, spins_before_check=50, ranks_started=1))
    symm.abort()

    def all_reduce():
        with pytest.raises(CommAbortedError, match=r"all_reduce \(two_shot, device\).*rank 1 \(block 0\) never ran"):
            symm.all_reduce(world(2, 3, np.int32), algo="two_shot")
        return True

    assert finishes_within(20, all_reduce)
    assert symm.pads_clear() and int(symm.abort_word[0]) == 0


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="nranks: expected 1 to 15"):
        dd.DeviceSymmetricMemory(16)
    with pytest.raises(ValueError, match="nblocks: expected a positive integer"):
        dd.DeviceSymmetricMemory(2, nblocks=0)
    with pytest.raises(ValueError, match="scope: expected one of gpu, system"):
        dd.DeviceSymmetricMemory(2, scope="node", group_threads=GROUP)
    symm = dd.DeviceSymmetricMemory(2, group_threads=GROUP)
    with pytest.raises(ValueError, match="algo: expected one of one_shot, two_shot"):
        symm.all_reduce(np.ones((2, 3)), algo="ring")
    with pytest.raises(ValueError, match="op: expected one of sum, prod, max, min"):
        symm.all_reduce(np.ones((2, 3)), op="avg")
    with pytest.raises(ValueError, match="buffers, out: expected two worlds of 2 rows of one count and dtype"):
        symm.all_reduce(np.ones((3, 3)))
    with pytest.raises(ValueError, match="buffers: expected one of float32"):
        symm.all_reduce(np.ones((2, 3), np.int8))
    d = cuda.to_device(np.ones((2, 3)))
    with pytest.raises(ValueError, match="out: the one-shot all-reduce reads every buffer until its last barrier"):
        symm.launch(d, d, "one_shot")


def test_the_kernels_compile_for_sm90_and_their_pad_waits_spin_on_atomics_inside_loops():
    kernels = ["one_shot_all_reduce_kernel", "two_shot_all_reduce_kernel"]
    for name, ptx in compile_ptxs(dd.__name__, kernels, dd._signature("float32")).items():
        # Two barriers, each a put and a wait: every compare-and-swap of a pad is an atomic inside its spin loop
        # (an atomic is never hoisted), and so is each read of the abort word (a volatile load).
        cas, cas_in_loops = lines_in_loops(ptx, r"atom\.global\.cas\.b32")
        assert cas >= 4 and cas_in_loops == cas, (name, cas, cas_in_loops)
        loads, loads_in_loops = lines_in_loops(ptx, r"ld\.volatile\.global")
        assert loads >= 4 and loads_in_loops == loads, (name, loads, loads_in_loops)
        # The release fence comes before the first put, the acquire fence after a wait: a fence of each scope
        # (chosen at run time) on both sides of the atomics; and the groups' named barriers.
        lines = ptx.splitlines()
        atoms = [i for i, line in enumerate(lines) if "atom.global.cas" in line]
        fences = [i for i, line in enumerate(lines) if re.search(r"membar\.(gl|sys)", line)]
        assert fences and fences[0] < atoms[0] and fences[-1] > atoms[-1], name
        assert ptx.count("membar.gl") >= 2 and ptx.count("membar.sys") >= 2, name
        assert ptx.count("barrier.sync") >= 2, name
