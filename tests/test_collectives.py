"""Every collective and algorithm against NumPy references built from all ranks' inputs, and their features.

Most cases run in a loopback world (:mod:`nbcoll.comm.loopback`: the ranks are threads of this process, every
algorithm, primitive and FIFO is the real one), so they cost no process launch. A few run under mpiexec, for the
transports themselves: ipc FIFOs and windows in ``/dev/shm``, the MPI transport, fake nodes, the simulator.

The heavy lifting is in ``mpi_scripts/coll_check.py`` (results, traffic) and ``mpi_scripts/coll_features.py``
(async, groups, the mismatch check, bad arguments, traces, timeouts), which run either way. A small FIFO
(``NBCOLL_BUFFSIZE=256``: 8 slots of 32 bytes) makes the larger counts span many chunks and rounds.
"""

import glob
import importlib.util
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import nbcoll
from nbcoll import testing
from nbcoll.comm import loopback
from nbcoll.comm.algorithms import ALGORITHMS, parse_algo_setting
from nbcoll.comm.config import CommConfig
from nbcoll.comm.tuner import LinkModel, choose, cost_terms, fit

SCRIPTS = Path(__file__).parent / "mpi_scripts"
SMALL_FIFO = {"NBCOLL_BUFFSIZE": "256", "NBCOLL_STEPS": "8", "NBCOLL_TIMEOUT": "60"}
SMALL_FIFO_CONFIG = {"buffsize": 256, "steps": 8, "timeout": 60.0}


_launched_pids: list[int] = []


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"mpi_scripts_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


coll_check = _script("coll_check")
coll_features = _script("coll_features")


def run_ranks(*args, **kwargs):
    """:func:`nbcoll.testing.run_ranks`, remembering the ranks' pids for the leak check."""
    result = testing.run_ranks(*args, **kwargs)
    _launched_pids.extend(pid for pid in result.pids if pid is not None)
    return result


def leaked_segments(pids) -> list[str]:
    """The ``/dev/shm`` names of these processes: other programs on the machine have segments of their own."""
    return [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]


@pytest.fixture(autouse=True)
def no_shared_memory_leak():
    _launched_pids.clear()
    before = set(leaked_segments([os.getpid()]))
    yield
    assert not leaked_segments(_launched_pids), "a /dev/shm segment of nbcoll was left behind"
    assert set(leaked_segments([os.getpid()])) <= before, "a loopback world made a /dev/shm segment"


def _loopback(nranks: int, backend: str, fn, *args, **config) -> list:
    """``fn(comm, *args)`` on every rank of a loopback world of ``nranks``, with the small FIFO."""
    with nbcoll.use_backend(backend):
        return loopback.run(nranks, fn, *args, config=CommConfig(**{**SMALL_FIFO_CONFIG, **config}))


def _check(nranks: int, backend: str, preset: str, big: int, collectives: str | None = None, **config) -> str:
    outputs = _loopback(
        nranks, backend, coll_check.check_all, preset, collectives or coll_check.ALL_COLLECTIVES, big, **config
    )
    for rank in range(nranks):
        assert "collective cases ok" in outputs[rank], outputs
    return outputs[0]


@pytest.mark.parametrize("nranks", [1, 2])
def test_every_collective_numpy_ipc(nranks):
    """Every dtype and op, in and out of place, counts 0, 1, < ranks, not divisible by them, and over the FIFO."""
    _check(nranks, "numpy", "full", big=300)


@pytest.mark.parametrize("nranks", [3, 4, 5])
def test_every_collective_numpy_ipc_more_ranks(nranks):
    """Odd, power-of-two and other rank counts, for the rings, trees and halving-doubling; fewer dtypes and ops."""
    _check(nranks, "numpy", "small", big=300)


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_collective_numpy_mpi_transport(nranks):
    """Every chunk through the MPI transport's staged synchronous sends (between threads here)."""
    _check(nranks, "numpy", "small", big=300, transport="mpi")


@pytest.mark.parametrize("nranks", [3, 4])
def test_every_collective_numpy_mixed_fake_nodes(nranks):
    """Two ranks per fake node: ipc inside a node, mpi between nodes, in the same collective."""
    _check(nranks, "numpy", "small", big=300, ranks_per_node=2)


@pytest.mark.simulator
@pytest.mark.parametrize(("nranks", "preset"), [(1, "tiny"), (2, "tiny_int"), (3, "tiny_float")])
def test_every_collective_on_the_simulator(nranks, preset):
    """int32 and sum at 2 and 5 ranks, float32 and avg at 3 and 4 (an average over 3 ranks), both at 1 rank and
    over processes (the numpy runs take every dtype and op)."""
    _check(nranks, "sim", preset, big=40)


@pytest.mark.simulator
def test_collectives_on_the_simulator_four_ranks_across_fake_nodes():
    """The collectives whose data cross the node boundary both ways or from a root; the numpy runs across fake
    nodes take every collective."""
    _check(4, "sim", "tiny_float", big=24, collectives="all_reduce,broadcast,all_gather,all_to_all", ranks_per_node=2)


@pytest.mark.simulator
def test_collectives_on_the_simulator_five_ranks():
    """Five ranks: not a power of two (halving-doubling folds one rank in), blocks of unequal size; the rooted and
    all-to-all collectives run at five ranks on numpy."""
    _check(5, "sim", "tiny_int", big=24, collectives="all_reduce,reduce,all_gather,reduce_scatter")


def test_ring_traffic_is_the_lower_bound():
    out = _check(4, "numpy", "tiny", big=1000, collectives="all_reduce")
    assert "ring all-reduce of 1000 floats sent 6000 bytes; 2(n-1)/n x buffer = 6000" in out


@pytest.mark.parametrize("section", ["async", "group", "badargs", "estimate"])
def test_collective_features(section):
    _loopback(3, "numpy", getattr(coll_features, f"section_{section}"))


@pytest.mark.simulator
@pytest.mark.parametrize("section", ["async", "group"])
def test_collective_features_on_the_simulator(section):
    _loopback(2, "sim", getattr(coll_features, f"section_{section}"))


def test_mismatch_is_reported_on_every_rank(monkeypatch, capsys):
    monkeypatch.setenv("NBCOLL_CHECK", "1")
    _loopback(3, "numpy", coll_features.section_check, check=True)
    out = capsys.readouterr().out
    for rank in range(3):
        assert f"rank {rank}: mismatch detected" in out
    assert out.count("rank 0 called all_reduce(count=4") == 3 and out.count("rank 2 called all_reduce(count=5") == 3


def test_trace_records_every_step_and_draws(tmp_path, monkeypatch):
    traces = tmp_path / "trace"
    monkeypatch.setenv("NBCOLL_TRACE", str(traces))
    _loopback(3, "numpy", coll_features.section_trace, trace=str(traces))
    assert sorted(os.listdir(traces)) == ["rank0.jsonl", "rank1.jsonl", "rank2.jsonl"]
    from nbcoll.__main__ import main

    image = tmp_path / "ring.png"
    assert main(["trace", "view", str(traces), "-o", str(image), "--seq", "1"]) == 0
    assert image.stat().st_size > 1000
    from nbcoll.comm.trace import load
    from nbcoll.comm.trace_view import arrows

    records = [r for r in load(traces) if r["seq"] == 1]
    channels = {r["channel"] for r in records}
    assert len(arrows(records)) == len(channels) * 3 * 2 * (3 - 1)  # every rank sends 2(n-1) chunks per channel


def test_a_rank_that_never_joins_makes_the_others_time_out(monkeypatch, capsys):
    monkeypatch.setenv("NBCOLL_TIMEOUT", "2")  # the section reads it to know how long to stay away
    _loopback(3, "numpy", coll_features.section_timeout, timeout=2.0)
    out = capsys.readouterr().out
    for rank in range(2):
        assert f"rank {rank}: timed out as expected" in out
    assert "NBCOLL_TIMEOUT" in out


# -- over processes: the transports themselves (ipc in /dev/shm, MPI, fake nodes) and the simulator -----------


def _check_processes(nprocs: int, backend: str, preset: str, big: int, **env: str) -> str:
    result = run_ranks(
        nprocs,
        SCRIPTS / "coll_check.py",
        "--preset",
        preset,
        "--big",
        str(big),
        env={"NBCOLL_BACKEND": backend, **SMALL_FIFO, **env},
        timeout=400,
    )
    for rank in range(nprocs):
        assert "collective cases ok" in result.outputs[rank], result.report()
    return result.outputs[0]


@pytest.mark.mpi
def test_every_collective_over_processes_ipc():
    _check_processes(3, "numpy", "small", big=300)


@pytest.mark.mpi
def test_every_collective_over_processes_mpi_transport():
    _check_processes(2, "numpy", "small", big=300, NBCOLL_TRANSPORT="mpi")


@pytest.mark.mpi
def test_every_collective_over_processes_mixed_fake_nodes():
    _check_processes(4, "numpy", "tiny", big=300, NBCOLL_RANKS_PER_NODE="2")


@pytest.mark.mpi
def test_every_collective_over_processes_on_the_simulator():
    _check_processes(2, "sim", "tiny", big=40)


# -- single-process pieces: the NBCOLL_ALGO syntax and the cost model ------------------------------------------


def test_nbcoll_algo_syntax():
    assert parse_algo_setting("ring")["all_reduce"] == {"ring"}
    assert parse_algo_setting("^tree")["all_reduce"] == {"ring", "direct", "halving_doubling"}
    setting = parse_algo_setting("allreduce:tree,direct;broadcast:ring")
    assert setting["all_reduce"] == {"tree", "direct"} and setting["broadcast"] == {"ring"}
    assert setting["all_gather"] == set(ALGORITHMS["all_gather"])
    with pytest.raises(ValueError, match="NBCOLL_ALGO: unknown algorithm"):
        parse_algo_setting("rings")
    with pytest.raises(ValueError, match="NBCOLL_ALGO: unknown collective 'allsum'"):
        parse_algo_setting("allsum:ring")


@pytest.mark.parametrize("setting", ["ring,tree", "^direct", "ring", "^ring,tree,direct,halving_doubling"])
def test_nbcoll_algo_list_narrows_only_the_collectives_it_leaves_an_algorithm(setting):
    """As NCCL_ALGO: a list for every collective leaves gather, scatter and barrier their only one."""
    table = parse_algo_setting(setting)
    for collective in ("gather", "scatter", "barrier"):
        assert table[collective] == set(ALGORITHMS[collective]), collective
    # All-to-all has two (pairwise, and direct over LL): excluding direct leaves pairwise, naming neither keeps both.
    excluded = setting.startswith("^") and "direct" in setting
    assert table["all_to_all"] == ({"pairwise"} if excluded else set(ALGORITHMS["all_to_all"]))
    assert all(table[collective] for collective in ALGORITHMS)
    # All-to-all has two (pairwise, direct): a list that names neither leaves both, one that excludes direct
    # leaves pairwise.
    assert table["all_to_all"] == ({"pairwise"} if "direct" in setting else {"pairwise", "direct"})
    if setting == "ring,tree":
        assert table["all_reduce"] == {"ring", "tree"} and table["all_gather"] == {"ring"}
    if setting == "^direct":
        assert table["all_reduce"] == {"ring", "tree", "halving_doubling"} and table["all_gather"] == {"ring"}


@pytest.mark.parametrize(
    ("setting", "named"),
    [("gather:^direct", "gather"), ("allreduce:pairwise", "all_reduce"), ("barrier:ring", "barrier")],
)
def test_nbcoll_algo_for_one_collective_must_leave_it_an_algorithm(setting, named):
    with pytest.raises(ValueError, match=re.escape(f"NBCOLL_ALGO: '{setting}' excludes every algorithm of {named}")):
        parse_algo_setting(setting)


def test_cost_model_prefers_few_steps_for_small_and_ring_for_large():
    model = LinkModel(alpha=50e-6, beta=1e9)
    algos = list(ALGORITHMS["all_reduce"])
    assert choose("all_reduce", algos, 8, 8, 1 << 19, model) in ("direct", "halving_doubling", "tree")
    assert choose("all_reduce", algos, 256 << 20, 8, 1 << 19, model) in ("ring", "halving_doubling")
    # One round of 4 chunks: send, 2 folds on the way, fold + copy, 2 copy-throughs, copy out; 10 blocks of S/4.
    steps, moved = cost_terms("all_reduce", "ring", 4 << 20, 4, 1 << 20)
    assert steps == 7 and moved == 10 / 4 * (4 << 20)
    # Direct reads its peers in place through windows, in 1 MiB pieces: two waits in the first round, one in each
    # later one; n x S copied or folded.
    assert cost_terms("all_reduce", "direct", 4 << 20, 4, 1 << 20, window_bytes=4 << 20) == (5, 4 * (4 << 20))


def test_fit_recovers_the_call_the_step_and_the_byte_cost():
    cases = [(1, 64), (3, 1 << 16), (7, 1 << 20), (15, 16 << 20), (4, 8 << 20), (30, 1 << 10)]
    seconds = [100e-6 + steps * 20e-6 + moved / 2e9 for steps, moved in cases]
    model = fit([c[0] for c in cases], [c[1] for c in cases], seconds)
    assert model.gamma == pytest.approx(100e-6, rel=1e-6) and model.alpha == pytest.approx(20e-6, rel=1e-6)
    assert model.beta == pytest.approx(2e9, rel=1e-6)
    # Noise that makes a parameter negative holds it at its floor: no negative step cost.
    flat = fit([1, 2, 3], [0, 1 << 20, 2 << 20], [1e-3, 0.9e-3, 1.1e-3])
    assert flat.alpha > 0 and flat.gamma >= 0 and flat.beta > 0


@pytest.mark.mpi
def test_calibrate_stores_a_model_per_transport_that_the_tuner_loads(tmp_path):
    store = tmp_path / "tuner.json"
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TUNER_FILE": str(store)}
    result = run_ranks(
        2,
        code="from nbcoll.__main__ import main; main(['calibrate', '--max-bytes', '4096', '--repeats', '2'])",
        env=env,
    )
    assert "ipc: alpha =" in result.outputs[0] and "mpi: alpha =" in result.outputs[0], result.report()
    assert "gamma =" in result.outputs[0] and "predicted" in result.outputs[0], result.report()
    saved = json.loads(store.read_text())
    (models,) = saved.values()
    assert set(models) == {"ipc", "mpi"}
    assert all(m["alpha"] > 0 and 0 < m["beta"] < float("inf") and m["gamma"] >= 0 for m in models.values())
    lonely = run_ranks(1, code="from nbcoll.__main__ import main; print('status', main(['calibrate']))", env=env)
    assert "needs at least 2 ranks" in lonely.outputs[0] and "status 2" in lonely.outputs[0]


def test_the_roots_buffer_of_gather_and_scatter_is_checked_where_it_is_given():
    # The root's buffer holds one block per rank: missing or the wrong size, the error names it (one rank: no peer
    # waits for the refused calls).
    def misuse(comm):
        block = np.zeros(2, np.int32)
        errors = []
        for call in (
            lambda: comm.gather(block, None, root=0),
            lambda: comm.gather(block, np.zeros(3, np.int32), root=0),
            lambda: comm.scatter(None, block, root=0),
            lambda: comm.scatter(np.zeros(5, np.int32), block, root=0),
        ):
            with pytest.raises(ValueError) as info:
                call()
            errors.append(str(info.value).split(":")[0])
        return errors

    with nbcoll.use_backend("numpy"):
        errors = loopback.run(1, misuse)
    assert errors == [["recvbuf", "recvbuf", "sendbuf", "sendbuf"]]
