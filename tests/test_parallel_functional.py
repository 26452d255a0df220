"""Differentiable collectives under mpiexec: forward results and gradcheck across 2, 3 and 4 ranks.

One launch per rank count runs every case (``mpi_scripts/parallel_functional.py``); the simulator runs a toy
size of the all-gather, whose backward is the reduce-scatter.
"""

from pathlib import Path

import pytest

from nbcoll.parallel import functional as F
from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "parallel_functional.py"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_every_collective_passes_gradcheck_numpy(nprocs):
    result = run_ranks(nprocs, SCRIPT, env={"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}, timeout=300)
    for rank in range(nprocs):
        assert "differentiable collectives ok: 11 cases" in result.outputs[rank], result.report()


def test_gradcheck_on_the_simulator_at_toy_size():
    env = {"NBCOLL_BACKEND": "sim", "NBCOLL_TIMEOUT": "120"}
    result = run_ranks(2, SCRIPT, "--cols", "1", "--only", "all_gather", env=env, timeout=300)
    for rank in range(2):  # all-gather's backward is a reduce-scatter: both run
        assert "differentiable collectives ok: 1 cases" in result.outputs[rank], result.report()


def test_every_collective_has_a_dual_that_is_itself_differentiable():
    assert set(F.DUALS) == set(F.DUALS.values())
    for name, dual in F.DUALS.items():
        assert F.DUALS[dual] == name or name == dual == F.DUALS[name]
