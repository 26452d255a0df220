"""Meshes and tensor parallelism under mpiexec, one launch per rank count (``mpi_scripts/tensor_parallel.py``).

Each launch checks the mesh communicators, the split layers against the full ones (forward and every gradient),
the vocabulary-parallel cross-entropy (value, gradient, and a peak memory of one process's over the rank count),
three SGD steps of a two-block transformer LM against one process (float64, 1e-10 relative), and the errors.
"""

from pathlib import Path

import pytest

from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "tensor_parallel.py"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs, cases", [(2, 17), (3, 17), (4, 21)])
def test_tensor_parallel_equals_one_process(nprocs, cases):
    result = run_ranks(nprocs, SCRIPT, env={"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}, timeout=300)
    for rank in range(nprocs):
        assert f"tensor parallel ok: {cases} cases" in result.outputs[rank], result.report()
