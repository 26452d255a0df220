"""The one-shot algorithms have one body whatever the protocol, and give the same results under each of them.

``nbcoll/comm/algorithms/direct.py`` is written in the one-shot primitives (:mod:`nbcoll.comm.protocol_simple`)
and never asks which protocol carries them: the plan chooses it (:func:`nbcoll.comm.planning.protocol_for`). The
same calls then run through FIFOs (the ``mpi`` transport), over the direct windows (``NBCOLL_LL_BYTES=0``, windows
small enough for several rounds) and over LL lines, on 1 to 4 ranks of a loopback world, at sizes that divide
nothing, and every protocol gives the same bits.
"""

import ast
import inspect
import threading

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback, planning
from nbcoll.comm.algorithms import direct
from nbcoll.comm.algorithms.common import Context
from nbcoll.comm.protocol_direct import DirectProtocol
from nbcoll.comm.protocol_ll import LLProtocol
from nbcoll.comm.protocol_simple import OneShot, SimpleProtocol

PROTOCOLS = {
    "SimpleProtocol": CommConfig(transport="mpi", timeout=60),
    "DirectProtocol": CommConfig(buffsize=256, ll_bytes=0, timeout=60),
    "LLProtocol": CommConfig(timeout=60),
}
PRIMITIVES = ("send", "copy_send", "recv", "recv_reduce_copy", "release")


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def test_no_algorithm_of_direct_py_asks_which_protocol_carries_it():
    tree = ast.parse(inspect.getsource(direct))
    asked = []
    for fn in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and node.attr in ("ll", "windows", "protocol"):
                asked.append(f"{fn.name}: .{node.attr}")
            if isinstance(node, ast.Name) and node.id.endswith("Protocol") or getattr(node, "id", None) == "isinstance":
                asked.append(f"{fn.name}: {node.id}")
    assert asked == []
    for protocol in (SimpleProtocol, DirectProtocol, LLProtocol):  # one vocabulary, each protocol its own steps
        assert issubclass(protocol, OneShot)
        assert all(getattr(protocol, name) is not getattr(OneShot, name) for name in PRIMITIVES[:4]), protocol


def _rank(comm, count):
    """Every one-shot collective of ``count`` elements per rank (or per block): integers, then a float sum."""
    r, n = comm.rank, comm.size
    rng = np.random.default_rng(17 + r)
    ints = nbcoll.to_device((np.arange(n * count, dtype=np.int32) * 7 + 1000 * r) % 9973)
    floats = nbcoll.to_device(rng.standard_normal(count).astype(np.float32))
    results = {}
    y = nbcoll.zeros(count, np.float32)
    comm.all_reduce(floats, y, algo="direct")
    results["all_reduce float"] = nbcoll.to_host(y)
    y = nbcoll.zeros(count, np.int32)
    comm.all_reduce(ints[:count], y, algo="direct")
    results["all_reduce"] = nbcoll.to_host(y)
    y = nbcoll.zeros(n * count, np.int32)
    comm.all_gather(ints[:count], y, algo="direct")
    results["all_gather"] = nbcoll.to_host(y)
    y = nbcoll.zeros(count, np.int32)
    comm.reduce_scatter(ints, y, algo="direct")
    results["reduce_scatter"] = nbcoll.to_host(y)
    y = nbcoll.zeros(n * count, np.int32)
    comm.all_to_all(ints, y, algo="direct")
    results["all_to_all"] = nbcoll.to_host(y)
    for root in sorted({0, n - 1}):
        buf = nbcoll.to_device(np.array(ints[:count]) if r == root else np.zeros(count, np.int32))
        comm.broadcast(buf, root=root, algo="direct")
        results[f"broadcast {root}"] = nbcoll.to_host(buf)
    return results


def _expected(n, count, r):
    ints = [(np.arange(n * count, dtype=np.int64) * 7 + 1000 * q) % 9973 for q in range(n)]
    return {
        "all_reduce": sum(x[:count] for x in ints),
        "all_gather": np.concatenate([x[:count] for x in ints]),
        "reduce_scatter": sum(x[r * count : (r + 1) * count] for x in ints),
        "all_to_all": np.concatenate([x[r * count : (r + 1) * count] for x in ints]),
        **{f"broadcast {root}": ints[root][:count] for root in sorted({0, n - 1})},
    }


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_the_same_algorithms_give_the_same_bits_under_every_protocol(monkeypatch, nranks):
    chosen, lock = set(), threading.Lock()

    def spy(links):
        protocol = choose(links)
        with lock:
            chosen.add(protocol.__name__)
        return protocol

    choose = planning.protocol_for
    monkeypatch.setattr(planning, "protocol_for", spy)
    for count in (0, 1, 37):
        runs = {}
        for name, config in PROTOCOLS.items():
            chosen.clear()
            runs[name] = loopback.run(nranks, _rank, count, config=config)
            if nranks > 1 and count:  # (one rank copies; an empty call fits no LL round)
                assert chosen == {name}, (name, count)
        for r in range(nranks):
            for collective, want in _expected(nranks, count, r).items():
                for name in PROTOCOLS:
                    np.testing.assert_array_equal(runs[name][r][collective], want, err_msg=f"{name} {collective}")
            floats = [runs[name][r]["all_reduce float"] for name in PROTOCOLS]  # every one folds in rank order
            assert all(np.array_equal(f.view(np.uint32), floats[0].view(np.uint32)) for f in floats), r


def test_fifos_refuse_a_block_per_peer_which_the_plan_sends_through_another_algorithm():
    ctx = Context(rank=0, nranks=2, chunk_elems=4, fifo_steps=2, op=None, post=None, send_connection=None,
                  recv_connection=None, counters=None)  # fmt: skip
    x = np.arange(6, dtype=np.int32)
    with pytest.raises(ValueError, match=r"in_block: expected None .* got 3"):
        ctx.one_shot(x, x[:3], 3, in_block=3)
    assert set(direct.THROUGH_FIFOS) == {"all_to_all", "reduce_scatter"}
    assert not SimpleProtocol.per_peer_blocks and DirectProtocol.per_peer_blocks and LLProtocol.per_peer_blocks
