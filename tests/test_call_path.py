"""How far one buffer travels through nbcoll's code, from ``Communicator.all_reduce`` to the combine kernel.

What is counted, precisely: on each of 2 ranks (numpy backend, one machine, so ipc), one all-reduce of 64 float32
per algorithm (ring, tree, direct, halving_doubling) runs with a ``sys.setprofile`` hook. Whenever the combine
kernel's launch function (``nbcoll.kernels.combine.fold_into``) is entered, the hook walks the Python stack back
to ``all_reduce`` and keeps the frames that run code of the ``nbcoll`` package, ``all_reduce`` and the launch
included (``tests/mpi_scripts/call_path.py``). A *call* is one such frame; a *module* is the module of its code,
and a *file* its source file. Every chain seen, with the fast paths off and with the default settings, must have at
most 8 calls in at most 6 modules, with no frame of other code in between (the standard library's, NumPy's), and
must reach ``all_reduce`` (the launch runs on the caller's thread). With the fast paths off, the files of a chain
are at most 8 and at most 1,500 lines together (``wc -l``), and after every collective has run the process has
imported no fast-path module. ``docs/guide/life_of_an_all_reduce.rst`` walks the same chain.

The fast paths change how bytes are copied and how often a call is planned, never what is computed: every
collective and algorithm gives the same bits with them on and off (loopback, 1 to 4 ranks).
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, algorithms, loopback
from nbcoll.comm.fast_paths import MODULES
from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "call_path.py"
MAX_CALLS = 8
MAX_MODULES = 6
MAX_FILES = 8
MAX_LINES = 1500


def _lines(module: str) -> int:
    source = importlib.util.find_spec(module).origin
    with open(source, "rb") as f:
        return f.read().count(b"\n")  # what wc -l counts


@pytest.mark.mpi
def test_all_reduce_reaches_the_combine_kernel_in_at_most_8_calls_in_6_modules_and_8_files_of_1500_lines():
    result = run_ranks(2, SCRIPT, env={"NBCOLL_BACKEND": "numpy"}, timeout=300)
    lines = [line for out in result.outputs for line in out.splitlines()]
    chains = [json.loads(line[len("CHAIN ") :]) for line in lines if line.startswith("CHAIN ")]
    imported = [json.loads(line[len("FASTPATH_MODULES ") :]) for line in lines if line.startswith("FASTPATH_MODULES ")]
    for fastpath in (False, True):
        seen = {chain["algo"] for chain in chains if chain["fastpath"] == fastpath}
        assert seen == {"ring", "tree", "direct", "halving_doubling"}, (fastpath, chains)
    for chain in chains:
        calls = [f"{module}.{function}" for module, function in chain["ours"]]
        modules = {module for module, _ in chain["ours"]}
        where = f"{chain['algo']} (fast paths {'on' if chain['fastpath'] else 'off'}): " + " -> ".join(calls)
        assert chain["complete"], f"the launch did not run under all_reduce on the caller's thread: {where}"
        assert calls[0] == "nbcoll.comm.collectives.all_reduce" and calls[-1] == "nbcoll.kernels.combine.fold_into"
        assert not chain["others"], f"frames of other code on the path: {chain['others']}; {where}"
        assert len(calls) <= MAX_CALLS, f"{len(calls)} calls (at most {MAX_CALLS}): {where}"
        assert len(modules) <= MAX_MODULES, f"{len(modules)} modules (at most {MAX_MODULES}): {where}"
        if not chain["fastpath"]:
            files = {module: _lines(module) for module in modules}  # one file per module
            assert len(files) <= MAX_FILES, f"{len(files)} files (at most {MAX_FILES}): {where}"
            total = sum(files.values())
            assert total <= MAX_LINES, f"{total} lines in {files} (at most {MAX_LINES}): {where}"
            assert not modules & set(MODULES), f"a fast-path module on the teaching path: {where}"
    assert imported == [[], []], f"fast-path modules imported with NBCOLL_FASTPATH=0: {imported}"


SIZES = (1, 5, 3001)  # 3001 float32: beyond the LL bytes set below, so the windows and the FIFOs carry it
ON = CommConfig(timeout=30.0, ll_bytes=1024, ll_compiled=True, stream_bytes=64, stream_shared_bytes=64, cma_bytes=64)
OFF = CommConfig.teaching(timeout=30.0, ll_bytes=1024, ll_compiled=True, stream_bytes=64, stream_shared_bytes=64,
                          cma_bytes=64)  # fmt: skip


def _every_collective(comm):
    """Every collective by every algorithm on odd sizes, each twice on the same buffers (a replay with the fast
    paths on); the results' bytes, and which fast paths the communicator uses."""
    r, n = comm.rank, comm.size
    rng = np.random.default_rng(r)
    out = []
    for count in SIZES:
        x = rng.standard_normal(count).astype(np.float32)  # not whole numbers: the order of a fold shows in bits
        blocks = rng.standard_normal(count * n).astype(np.float32)
        calls = {
            "all_reduce": lambda a, x=x: comm.all_reduce(x, np.zeros_like(x), op="sum", algo=a),
            "broadcast": lambda a, x=x: comm.broadcast(x, np.zeros_like(x), root=n - 1, algo=a),
            "reduce": lambda a, x=x: comm.reduce(x, np.zeros_like(x), op="max", root=0, algo=a),
            "all_gather": lambda a, x=x: comm.all_gather(x, np.zeros(x.size * n, x.dtype), algo=a),
            "reduce_scatter": lambda a, b=blocks, c=count: comm.reduce_scatter(b, np.zeros(c, b.dtype), algo=a),
            "all_to_all": lambda a, b=blocks: comm.all_to_all(b, np.zeros_like(b), algo=a),
            "gather": lambda a, x=x: comm.gather(x, np.zeros(x.size * n, x.dtype), root=0, algo=a),
            "scatter": lambda a, b=blocks, c=count: comm.scatter(b, np.zeros(c, b.dtype), root=0, algo=a),
        }
        for name, call in calls.items():
            for algo in algorithms.ALGORITHMS[name]:
                for _ in range(2):
                    out.append((name, algo, count, np.asarray(call(algo)).tobytes()))
    engine = comm.engine
    return out, (engine.replays is not None, engine.copies is not None, engine.fast.any)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_every_collective_gives_the_same_bits_with_the_fast_paths_on_and_off(nranks):
    with nbcoll.use_backend("numpy"):
        on = loopback.run(nranks, _every_collective, config=ON)
        off = loopback.run(nranks, _every_collective, config=OFF)
    for rank, ((got, used), (want, unused)) in enumerate(zip(on, off, strict=True)):
        assert unused == (False, False, False), (rank, unused)
        assert used[0] and used[2], (rank, used)  # replays at least, on every CPU
        assert len(got) == len(want) > 0
        for a, b in zip(got, want, strict=True):
            assert a == b, (rank, a[:3])
