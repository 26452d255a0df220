"""How far one buffer travels through nbcoll's code, from ``Communicator.all_reduce`` to the combine kernel.

What is counted, precisely: on each of 2 ranks (numpy backend, one machine, so ipc), one all-reduce of 64 float32
per algorithm (ring, tree, direct, halving_doubling) runs with a ``sys.setprofile`` hook. Whenever the combine
kernel's launch function (``nbcoll.kernels.combine.fold_into``) is entered, the hook walks the Python stack back
to ``all_reduce`` and keeps the frames that run code of the ``nbcoll`` package, ``all_reduce`` and the launch
included (``tests/mpi_scripts/call_path.py``). A *call* is one such frame; a *module* is the module of its code.
Every chain seen must have at most 8 calls in at most 6 modules, with no frame of other code in between (the
standard library's, NumPy's), and must reach ``all_reduce`` (the launch runs on the caller's thread).
``docs/guide/life_of_an_all_reduce.rst`` walks the same chain.
"""

import json
from pathlib import Path

import pytest

from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "call_path.py"
MAX_CALLS = 8
MAX_MODULES = 6

pytestmark = pytest.mark.mpi


def test_all_reduce_reaches_the_combine_kernel_in_at_most_8_calls_in_6_modules():
    result = run_ranks(2, SCRIPT, env={"NBCOLL_BACKEND": "numpy"}, timeout=300)
    chains = [
        json.loads(line[len("CHAIN ") :])
        for out in result.outputs
        for line in out.splitlines()
        if line.startswith("CHAIN ")
    ]
    assert {chain["algo"] for chain in chains} == {"ring", "tree", "direct", "halving_doubling"}, chains
    for chain in chains:
        calls = [f"{module}.{function}" for module, function in chain["ours"]]
        modules = {module for module, _ in chain["ours"]}
        where = f"{chain['algo']}: " + " -> ".join(calls)
        assert chain["complete"], f"the launch did not run under all_reduce on the caller's thread: {where}"
        assert calls[0] == "nbcoll.comm.collectives.all_reduce" and calls[-1] == "nbcoll.kernels.combine.fold_into"
        assert not chain["others"], f"frames of other code on the path: {chain['others']}; {where}"
        assert len(calls) <= MAX_CALLS, f"{len(calls)} calls (at most {MAX_CALLS}): {where}"
        assert len(modules) <= MAX_MODULES, f"{len(modules)} modules (at most {MAX_MODULES}): {where}"
