"""Differentiable collectives: forward results and gradcheck across 2, 3 and 4 ranks.

Every case (``mpi_scripts/parallel_functional.py``) runs on each rank of a loopback world (ranks as threads of
this process, :mod:`nbcoll.comm.loopback`); one launch under mpiexec shows the script runs across processes. The
simulator runs a toy size of the all-gather, whose backward is the reduce-scatter.
"""

import importlib.util
from pathlib import Path

import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.parallel import functional as F
from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "parallel_functional.py"
_spec = importlib.util.spec_from_file_location("mpi_scripts_parallel_functional", SCRIPT)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_every_collective_passes_gradcheck_numpy(nranks):
    with nbcoll.use_backend("numpy"):
        outputs = loopback.run(nranks, script.check_all, config=CommConfig(timeout=60))
    for rank in range(nranks):
        assert f"rank {rank}: differentiable collectives ok: 11 cases" == outputs[rank]


@pytest.mark.mpi
def test_every_collective_passes_gradcheck_over_processes():
    result = run_ranks(3, SCRIPT, env={"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}, timeout=300)
    for rank in range(3):
        assert "differentiable collectives ok: 11 cases" in result.outputs[rank], result.report()


@pytest.mark.simulator
def test_gradcheck_on_the_simulator_at_toy_size():
    with nbcoll.use_backend("sim"):  # all-gather's backward is a reduce-scatter: both run
        outputs = loopback.run(2, script.check_all, 1, 1, "all_gather", config=CommConfig(timeout=120))
    assert outputs == [f"rank {rank}: differentiable collectives ok: 1 cases" for rank in range(2)]


def test_every_collective_has_a_dual_that_is_itself_differentiable():
    assert set(F.DUALS) == set(F.DUALS.values())
    for name, dual in F.DUALS.items():
        assert F.DUALS[dual] == name or name == dual == F.DUALS[name]
