"""The ring's all-gather, reduce-scatter, broadcast and reduce as kernels (ring_device_collectives), launched in
the one-GPU world (ring_device_world), against their NumPy references and against the host-stepped ring.

As tests/test_device_ring.py: the kernels run on this process's device backend, the simulator here (each rank a
group of 4 threads of one block), a GPU where there is one (groups of 32).
"""

import threading

import numpy as np
import pytest
from device_helpers import compile_ptxs, finishes_within, lines_in_loops, world
from numba import cuda

import nbcoll
from nbcoll.backend import device_backend
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.algorithms import ring_device_collectives as rc
from nbcoll.comm.algorithms.ring_device import raise_for_status
from nbcoll.comm.algorithms.ring_device_world import DeviceRingCollectives
from nbcoll.comm.device import prims as dp
from nbcoll.comm.errors import CommAbortedError

GROUP = 32 if device_backend() == "cuda" else 4
DTYPES = [np.int32, np.int64, np.float32, np.float64]
COUNTS = [0, 1, 5, 37]
COLLECTIVES = ["all_gather", "reduce_scatter", "broadcast", "reduce"]


def _input(collective: str, nranks: int, count: int, dtype, seed: int = 0) -> np.ndarray:
    # Reduce-scatter's input is n blocks of `count` per rank; every other's one block.
    return world(nranks, count * (nranks if collective == "reduce_scatter" else 1), dtype, seed=seed)


def _on_device(ring, collective: str, x: np.ndarray, op: str = "sum", root: int = 0, fill: int = -7) -> np.ndarray:
    """The kernel's ``out`` out of place, from an ``out`` filled with ``fill`` (so that a row left alone shows)."""
    n, count = x.shape[0], x.shape[1] // (ring.nranks if collective == "reduce_scatter" else 1)
    width = n * count if collective == "all_gather" else count
    out = cuda.to_device(np.full((n, width), fill, x.dtype))
    status = ring.launch_collective(collective, cuda.to_device(x), out, op, root)
    assert (status[:, :, 0] == dp.OK).all(), status
    return out.copy_to_host()


def _reference(collective: str, x: np.ndarray, op: str = "sum", root: int = 0, slot_elems: int = 8, nchannels=1):
    if collective == "all_gather":
        return rc.all_gather_reference(x, slot_elems, nchannels)
    if collective == "reduce_scatter":
        return rc.reduce_scatter_reference(x, op, slot_elems, nchannels)
    if collective == "broadcast":
        return rc.broadcast_reference(x, root, slot_elems, nchannels)
    return rc.reduce_reference(x, op, root, slot_elems, nchannels)


def _host_ring(comm, collective: str, x: np.ndarray, op: str, root: int):
    """This rank's result of the host-stepped ring (nbcoll.comm.algorithms.ring) on its row of ``x``."""
    mine, n = x[comm.rank].copy(), comm.size
    if collective == "all_gather":
        return comm.all_gather(mine, np.zeros(n * mine.size, mine.dtype), algo="ring")
    if collective == "reduce_scatter":
        return comm.reduce_scatter(mine, np.zeros(mine.size // n, mine.dtype), op=op, algo="ring")
    if collective == "broadcast":
        return comm.broadcast(mine, root=root, algo="ring")
    out = np.zeros_like(mine)
    comm.reduce(mine, out, op=op, root=root, algo="ring")
    return out if comm.rank == root else None


def _host_results(nranks: int, cases: list, nchannels: int = 1, slot_bytes: int = 32) -> list:
    """Every case ``(collective, x, op, root)`` through the host ring in one loopback world: results by case."""

    def every_case(comm):
        return [_host_ring(comm, *case) for case in cases]

    config = CommConfig(buffsize=4 * slot_bytes, steps=4, nchannels=nchannels, timeout=60.0)
    with nbcoll.use_backend("numpy"):
        by_rank = loopback.run(nranks, every_case, config=config)
    return [[by_rank[r][i] for r in range(nranks)] for i in range(len(cases))]


def _check(collective: str, out: np.ndarray, reference: np.ndarray, host: list, root: int) -> None:
    """The kernel equals its reference and the host ring to the bit (floats too: the same folds in the same order)."""
    if collective == "reduce":  # the root's row only; every other rank's out is left as it was
        np.testing.assert_array_equal(out[root], reference)
        np.testing.assert_array_equal(host[root], reference)
        assert (np.delete(out, root, axis=0) == -7).all() and all(h is None for r, h in enumerate(host) if r != root)
    else:
        np.testing.assert_array_equal(out, reference)
        np.testing.assert_array_equal(np.stack(host), reference)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_each_kernel_equals_its_reference_and_the_host_ring(collective, nranks):
    # Every count and dtype, rooted at the last rank: 8-element slots, so 37 takes 5 chunks.
    ring = DeviceRingCollectives(nranks, slot_elems=8, steps=2, group_threads=GROUP)
    root = nranks - 1
    cases = [(collective, _input(collective, nranks, c, t, seed=c), "sum", root) for c in COUNTS for t in DTYPES]
    host = _host_results(nranks, cases, slot_bytes=8 * 8)  # 8 elements of the widest dtype per host chunk
    for (_, x, op, _), from_host in zip(cases, host, strict=True):
        _check(
            collective, _on_device(ring, collective, x, op, root), _reference(collective, x, op, root), from_host, root
        )


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_many_fifo_rounds_through_a_tiny_slot_and_two_channels(collective):
    # 37 elements per block, 4 ranks, 2-element slots in a 2-slot FIFO, 2 channels: parts of 19 and 18 elements,
    # 10 and 9 chunks, each chunk n steps of the ring or one step of the chain, on every rank.
    ring = DeviceRingCollectives(4, slot_elems=2, steps=2, nchannels=2, group_threads=GROUP)
    cases = [(collective, _input(collective, 4, 37, t, seed=5), "sum", 1) for t in (np.int64, np.float64)]
    host = _host_results(4, cases, nchannels=2, slot_bytes=16)
    per_chunk = 4 if collective in ("all_gather", "reduce_scatter") else 1
    for (_, x, op, root), from_host in zip(cases, host, strict=True):
        out = cuda.to_device(np.full_like(_on_device(ring, collective, x, op, root), -7))
        status = ring.launch_collective(collective, cuda.to_device(x), out, op, root)
        assert (status[:, :, 0] == dp.OK).all(), status
        np.testing.assert_array_equal(status[:, :, 1], [[10 * per_chunk] * 4, [9 * per_chunk] * 4])
        reference = _reference(collective, x, op, root, slot_elems=2, nchannels=2)
        _check(collective, out.copy_to_host(), reference, from_host, root)


@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_every_root_of_the_chains(collective):
    ring = DeviceRingCollectives(4, slot_elems=4, steps=2, group_threads=GROUP)
    cases = [(collective, world(4, 37, t, seed=root), "sum", root) for root in range(4) for t in (np.int32, np.float32)]
    host = _host_results(4, cases, slot_bytes=16)
    for (_, x, op, root), from_host in zip(cases, host, strict=True):
        _check(
            collective, _on_device(ring, collective, x, op, root), _reference(collective, x, op, root), from_host, root
        )


@pytest.mark.parametrize("op", ["prod", "max", "min"])
def test_every_op_of_the_reducing_kernels(op):
    ring = DeviceRingCollectives(3, slot_elems=4, steps=2, group_threads=GROUP)
    cases = [(c, _input(c, 3, 13, t, seed=2), op, 0) for c in ("reduce_scatter", "reduce") for t in DTYPES]
    host = _host_results(3, cases, slot_bytes=16)
    for (collective, x, op, root), from_host in zip(cases, host, strict=True):
        _check(
            collective, _on_device(ring, collective, x, op, root), _reference(collective, x, op, root), from_host, root
        )


def test_in_place_as_the_communicator_has_it():
    ring = DeviceRingCollectives(3, slot_elems=4, steps=2, group_threads=GROUP)
    x = world(3, 5, np.float64, seed=9)
    # All-gather: each rank's input is its own block of out; the other blocks are overwritten.
    everyone = np.full((3, 15), -7.0)
    for r in range(3):
        everyone[r, 5 * r : 5 * r + 5] = x[r]
    np.testing.assert_array_equal(ring.all_gather(None, everyone), rc.all_gather_reference(x))
    # Reduce-scatter: each rank's result lands in its own block of its input.
    blocks = world(3, 15, np.float64, seed=10)
    expected = rc.reduce_scatter_reference(blocks, "sum")
    kept = blocks.copy()
    ring.reduce_scatter(blocks)
    for r in range(3):
        np.testing.assert_array_equal(blocks[r, 5 * r : 5 * r + 5], expected[r])
        np.testing.assert_array_equal(
            np.delete(blocks[r], np.s_[5 * r : 5 * r + 5]), np.delete(kept[r], np.s_[5 * r : 5 * r + 5])
        )
    # Broadcast and reduce overwrite their input, reduce on the root only.
    y = x.copy()
    np.testing.assert_array_equal(ring.broadcast(y, root=2), rc.broadcast_reference(x, 2))
    y = x.copy()
    ring.reduce(y, op="max", root=1)
    np.testing.assert_array_equal(y[1], rc.reduce_reference(x, "max", 1))
    np.testing.assert_array_equal(y[[0, 2]], x[[0, 2]])


def test_out_of_place_leaves_the_input_and_the_other_rows_alone():
    ring = DeviceRingCollectives(3, slot_elems=4, steps=2, group_threads=GROUP)
    x = world(3, 7, np.int64, seed=4)
    out = np.full((3, 7), -7, np.int64)
    ring.reduce(x, out, root=2)
    assert (out[:2] == -7).all()
    np.testing.assert_array_equal(out[2], x.sum(axis=0))
    np.testing.assert_array_equal(x, world(3, 7, np.int64, seed=4))
    np.testing.assert_array_equal(ring.broadcast(x, np.zeros_like(x), root=0), np.broadcast_to(x[0], x.shape))
    np.testing.assert_array_equal(ring.reduce_scatter(world(3, 21, np.int64, seed=4), np.zeros((3, 7), np.int64)),
                                  rc.reduce_scatter_reference(world(3, 21, np.int64, seed=4)))  # fmt: skip


def test_the_counters_carry_on_across_collectives_and_roots():
    # The chains leave the link into the root idle; the rings use every link: each rank's counts stay its own.
    ring = DeviceRingCollectives(3, slot_elems=4, steps=2, group_threads=GROUP)
    x = world(3, 11, np.int32, seed=1)
    np.testing.assert_array_equal(ring.broadcast(x.copy(), root=0), rc.broadcast_reference(x, 0))
    np.testing.assert_array_equal(ring.reduce(x.copy(), root=2)[2], rc.reduce_reference(x, "sum", 2))
    np.testing.assert_array_equal(ring.all_gather(x, np.zeros((3, 33), np.int32)), rc.all_gather_reference(x))
    np.testing.assert_array_equal(ring.all_reduce(x.copy()), np.broadcast_to(x.sum(axis=0), x.shape))
    tail, head = ring.tail.copy_to_host(), ring.head.copy_to_host()
    np.testing.assert_array_equal(tail, head)  # every chunk posted was consumed
    # Into rank 0, 1, 2: broadcast from 0 (3 chunks to 1 and 2), reduce to 2 (3 to 1 and 2 from 0 and 1),
    # all-gather (3 x 2 into each), all-reduce (one round of 4 into each).
    np.testing.assert_array_equal(tail[:: dp.COUNTER_STRIDE], [6 + 4, 3 + 3 + 6 + 4, 3 + 3 + 6 + 4])


R, S, N = dp.ABORTED_RECV, dp.ABORTED_SEND, dp.RUNNING


@pytest.mark.parametrize(
    ("collective", "root", "expected"),
    [
        # The rings: rank 0 waits at its recv for rank 2's chunk; rank 1 passes rank 0's on, then waits likewise.
        ("all_gather", 0, [[R, 2], [R, 3], [N, -1]]),
        ("reduce_scatter", 0, [[R, 2], [R, 3], [N, -1]]),
        # Broadcast from 0: rank 1 fills rank 2's two slots and waits for one to free; rank 0 then fills rank 1's.
        ("broadcast", 0, [[S, 5], [S, 3], [N, -1]]),
        ("broadcast", 2, [[R, 1], [R, 1], [N, -1]]),  # from the missing rank: nothing ever comes
        # Reduce to 0: the chain 1 -> 2 -> 0 stops at once; to 2: 0 -> 1 -> 2 fills rank 2's slots first.
        ("reduce", 0, [[R, 1], [S, 3], [N, -1]]),
        ("reduce", 2, [[S, 5], [S, 3], [N, -1]]),
    ],
)
def test_a_rank_that_never_starts_leaves_the_others_aborting_not_spinning(collective, root, expected):
    ring = DeviceRingCollectives(3, slot_elems=4, steps=2, group_threads=GROUP)
    ring.abort()  # the host has given up already; each spin reads the word every 50 spins
    x = cuda.to_device(_input(collective, 3, 37, np.int64))
    out = cuda.to_device(np.zeros((3, 111 if collective == "all_gather" else 37), np.int64))

    def run():
        return ring.launch_collective(collective, x, out, root=root, spins_before_check=50, ranks_started=2)

    status = finishes_within(20, run)
    assert status[0].tolist() == expected
    with pytest.raises(CommAbortedError, match=rf"^{collective} \(ring, device\): .*rank 2 \(channel 0\) never ran"):
        raise_for_status(status, collective)


def test_the_host_setting_the_abort_word_stops_a_chain_that_is_already_spinning():
    ring = DeviceRingCollectives(2, slot_elems=4, steps=2, group_threads=GROUP)
    x, out = cuda.to_device(world(2, 9, np.float32)), cuda.to_device(np.zeros((2, 9), np.float32))
    timer = threading.Timer(0.3, ring.abort)
    timer.start()
    try:  # rank 1 never comes: the root fills its two slots and waits for one to free
        status = finishes_within(20, lambda: ring.launch_collective("broadcast", x, out, spins_before_check=100,
                                                                    ranks_started=1))  # fmt: skip
    finally:
        timer.cancel()
    assert status[0].tolist() == [[dp.ABORTED_SEND, 3], [dp.RUNNING, -1]]


def test_bad_arguments_name_the_argument():
    ring = DeviceRingCollectives(2, slot_elems=4, group_threads=GROUP)
    x = cuda.to_device(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="collective: expected one of all_gather, reduce_scatter, broadcast, reduce"):
        ring.launch_collective("all_to_all", x, x)
    with pytest.raises(ValueError, match=r"root: expected a rank in \[0, 2\), got 2"):
        ring.broadcast(np.ones((2, 3)), root=2)
    with pytest.raises(ValueError, match=r"root: expected a rank in \[0, 2\), got True"):
        ring.reduce(np.ones((2, 3)), root=True)
    with pytest.raises(ValueError, match="op: expected one of sum, prod, max, min"):
        ring.reduce_scatter(np.ones((2, 4)), np.ones((2, 2)), op="avg")
    expected = r"expected shapes \(2, 3\) and \(2, 6\) of one dtype for all_gather on 2 ranks, got \(2, 3\) float64 and"
    with pytest.raises(ValueError, match=rf"local, out: {expected} \(2, 5\) float64"):
        ring.all_gather(np.ones((2, 3)), np.ones((2, 5)))
    with pytest.raises(ValueError, match=r"local, out: expected shapes \(2, 4\) and \(2, 4\)"):
        ring.reduce_scatter(np.ones((2, 5)))  # in place: 5 is not 2 blocks
    with pytest.raises(ValueError, match=r"local, out: expected shapes \(2, 3\) and \(2, 3\) of one dtype"):
        ring.broadcast(np.ones((2, 3)), np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"local, out: expected 2-D arrays of 2 rows"):
        ring.reduce(np.ones(6), np.ones(6))
    with pytest.raises(ValueError, match="local: expected one of float32"):
        ring.broadcast(np.ones((2, 3), np.int8))


def test_every_kernel_compiles_for_sm90_and_its_spins_load_volatile_inside_loops():
    kernels = [kernel.py_func.__name__ for kernel in rc.KERNELS.values()]
    ptx = compile_ptxs("nbcoll.comm.algorithms.ring_device_collectives", kernels, rc._signature("float32"))
    for name in kernels:
        loads, in_loops = lines_in_loops(ptx[name], r"ld\.volatile\.global")
        # Three primitives, each waiting on a counter (tail, head) and, every few spins, on the abort word: twelve
        # loads in loops; only the two reads of where the last call left off are not.
        assert in_loops >= 12 and loads - in_loops <= 2, (name, loads, in_loops)
        assert ptx[name].count("barrier.sync") >= 2 and ptx[name].count("st.volatile.global") >= 2, name
        assert ptx[name].count("membar.gl") >= 1 and ptx[name].count("membar.sys") >= 1, name
