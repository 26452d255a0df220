"""Every collective on bfloat16, float8_e4m3fn and float8_e5m2, against ml_dtypes references computed the way the
combine module documents: each reduce step in float32, rounded once.

Small integers keep every partial result representable, so those results cannot depend on the order of the steps;
one test sums arbitrary values and follows the ring's order, rounding after every step as the ring does.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import loopback
from nbcoll.comm.algorithms.common import rounds
from nbcoll.comm.config import CommConfig

LOW = [nbcoll.bfloat16, nbcoll.float8_e4m3fn, nbcoll.float8_e5m2]
COUNT = 37  # not a multiple of any rank count here


def inputs(nranks, count, dtype, seed=0):
    """One row per rank of 0, 1 and 2: sums up to 8 on 4 ranks, which even e5m2 (2 mantissa bits) holds exactly."""
    return np.random.default_rng(seed).integers(0, 3, size=(nranks, count)).astype(np.float32).astype(dtype)


def reduced(op, rows):
    """The reduction of ``rows`` in float32 (exact for these inputs), rounded once; avg then divides, rounded once."""
    wide = rows.astype(np.float32)
    if op == "avg":
        total = wide.sum(axis=0).astype(rows.dtype).astype(np.float32)
        return (total / np.float32(len(rows))).astype(rows.dtype)
    folds = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
    return folds[op](wide, axis=0).astype(rows.dtype)


def every_collective(comm, x, dtype):
    """Each collective of this rank's input ``x`` (a host row), as host arrays, by name."""
    n, r, count = comm.size, comm.rank, x.size
    dev = nbcoll.to_device
    out = {op: nbcoll.to_host(comm.all_reduce(dev(x), nbcoll.zeros(count, dtype), op=op)) for op in OPS}
    out["all_reduce ring"] = nbcoll.to_host(comm.all_reduce(dev(x), nbcoll.zeros(count, dtype), algo="ring"))
    out["all_reduce tree"] = nbcoll.to_host(comm.all_reduce(dev(x), nbcoll.zeros(count, dtype), algo="tree"))
    out["premul_sum"] = nbcoll.to_host(comm.all_reduce(dev(x), op=nbcoll.premul_sum(0.5)))
    out["reduce"] = nbcoll.to_host(comm.reduce(dev(x), nbcoll.zeros(count, dtype), root=n - 1))
    blocks = np.concatenate([x] * n)
    out["reduce_scatter"] = nbcoll.to_host(comm.reduce_scatter(dev(blocks), nbcoll.zeros(count, dtype)))
    out["all_gather"] = nbcoll.to_host(comm.all_gather(dev(x), nbcoll.zeros(count * n, dtype)))
    out["broadcast"] = nbcoll.to_host(comm.broadcast(dev(x), nbcoll.zeros(count, dtype), root=0))
    out["all_to_all"] = nbcoll.to_host(comm.all_to_all(dev(blocks), nbcoll.zeros(count * n, dtype)))
    out["gather"] = nbcoll.to_host(comm.gather(dev(x), nbcoll.zeros(count * n, dtype), root=0))
    out["scatter"] = nbcoll.to_host(comm.scatter(dev(blocks), nbcoll.zeros(count, dtype), root=0))
    received = nbcoll.zeros(count, dtype)
    if n > 1:  # a ring of sends: each rank passes its row to the next
        with comm.group():
            comm.send(dev(x), (r + 1) % n)
            comm.recv(received, (r - 1) % n)
    out["send/recv"] = nbcoll.to_host(received)
    return out


OPS = ["sum", "prod", "max", "min", "avg"]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_every_collective_equals_the_ml_dtypes_reference(dtype, nranks):
    rows = inputs(nranks, COUNT, dtype)
    with nbcoll.use_backend("numpy"):
        results = loopback.run(nranks, lambda comm: every_collective(comm, rows[comm.rank], dtype))
    half = (rows.astype(np.float32) * np.float32(0.5)).astype(dtype)
    for r, got in enumerate(results):
        expected = {op: reduced(op, rows) for op in OPS}
        expected["all_reduce ring"] = expected["all_reduce tree"] = expected["sum"]
        expected["premul_sum"] = reduced("sum", half)
        expected["all_gather"] = rows.reshape(-1)
        expected["broadcast"] = rows[0]
        expected["reduce_scatter"] = expected["sum"]
        expected["all_to_all"] = np.concatenate([rows[q] for q in range(nranks)])
        expected["scatter"] = rows[0]
        expected["send/recv"] = rows[(r - 1) % nranks] if nranks > 1 else np.zeros(COUNT, dtype)
        if r == nranks - 1:
            expected["reduce"] = expected["sum"]
        if r == 0:
            expected["gather"] = rows.reshape(-1)
        for name, want in expected.items():
            assert got[name].dtype == dtype, name
            assert np.array_equal(got[name].view(np.uint8), want.view(np.uint8)), (name, r, got[name], want)


def ring_sum_reference(rows, chunk_elems):
    """The ring all-reduce's sum, step by step: block b of each round starts on rank b+1 and collects rank b+2,
    ..., rank b last, each addition in float32 and rounded to the dtype (:mod:`nbcoll.comm.algorithms.ring`)."""
    n, count = rows.shape
    out = np.empty(count, rows.dtype)
    for round_blocks in rounds(count, n, chunk_elems):
        for b, (lo, hi) in enumerate(round_blocks):
            acc = rows[(b + 1) % n, lo:hi]
            for j in range(2, n + 1):
                acc = (acc.astype(np.float32) + rows[(b + j) % n, lo:hi].astype(np.float32)).astype(rows.dtype)
            out[lo:hi] = acc
    return out


@pytest.mark.parametrize("nranks", [2, 3, 4])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_ring_sum_of_arbitrary_values_rounds_once_per_step_in_ring_order(dtype, nranks):
    rng = np.random.default_rng(nranks)
    count = 1001
    rows = (rng.standard_normal((nranks, count)) * 3).astype(np.float32).astype(dtype)
    config = CommConfig(nchannels=1, buffsize=8 * 64)  # chunks of 64 bytes: several rounds of the ring
    chunk_elems = config.chunk_bytes // dtype.itemsize

    def ring(comm):
        return nbcoll.to_host(comm.all_reduce(nbcoll.to_device(rows[comm.rank]), algo="ring"))

    with nbcoll.use_backend("numpy"):
        results = loopback.run(nranks, ring, config=config)
    expected = ring_sum_reference(rows, chunk_elems)
    # Rounding once at the end, or folding in rank order, gives other bits: the test sees the order of the steps.
    once = reduced("sum", rows)
    in_rank_order = rows[0]
    for row in rows[1:]:
        in_rank_order = (in_rank_order.astype(np.float32) + row.astype(np.float32)).astype(dtype)
    for other in (once, in_rank_order):
        assert nranks < 3 or not np.array_equal(expected.view(np.uint8), other.view(np.uint8))
    for got in results:
        assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("nranks", [1, 3])
def test_collectives_on_the_simulator(nranks):
    """The combine, scale and copy kernels on the words, at toy sizes: sum, avg and premul_sum, and a gather."""
    count = 5

    def run(comm, dtype, rows):
        x = nbcoll.to_device(rows[comm.rank])
        summed = nbcoll.to_host(comm.all_reduce(x, nbcoll.zeros(count, dtype), algo="ring"))
        avg = nbcoll.to_host(comm.all_reduce(x, nbcoll.zeros(count, dtype), op="avg"))
        premul = nbcoll.to_host(comm.all_reduce(x, nbcoll.zeros(count, dtype), op=nbcoll.premul_sum(0.5)))
        gathered = nbcoll.to_host(comm.all_gather(x, nbcoll.zeros(count * comm.size, dtype)))
        return summed, avg, premul, gathered

    for dtype in LOW:
        rows = inputs(nranks, count, dtype, seed=nranks)
        with nbcoll.use_backend(nbcoll.backend.device_backend()):
            results = loopback.run(nranks, run, dtype, rows)
        half = (rows.astype(np.float32) * np.float32(0.5)).astype(dtype)
        for summed, avg, premul, gathered in results:
            assert np.array_equal(summed, reduced("sum", rows)) and summed.dtype == dtype
            assert np.array_equal(avg, reduced("avg", rows))
            assert np.array_equal(premul, reduced("sum", half))
            assert np.array_equal(gathered, rows.reshape(-1))


def test_the_cross_rank_signature_check_names_low_precision_dtypes():
    from nbcoll.comm.check import Signature

    for dtype in LOW:
        signature = Signature("all_reduce", 5, str(dtype), "sum", -1, False)
        assert Signature.decode(signature.encode()) == signature
    rows = inputs(2, 5, nbcoll.float8_e4m3fn)
    with nbcoll.use_backend("numpy"):
        got = loopback.run(
            2,
            lambda comm: nbcoll.to_host(comm.all_reduce(nbcoll.to_device(rows[comm.rank]))),
            config=CommConfig(check=True),
        )
    assert np.array_equal(got[1], reduced("sum", rows))
