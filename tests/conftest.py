"""Shared fixtures: every single-process kernel test runs on the device backend (sim or cuda) and on numpy."""

import subprocess

import numpy as np
import pytest

import nbcoll
from nbcoll.backend import device_backend
from nbcoll.launch import find_mpiexec

DEVICE = device_backend()


@pytest.fixture(params=[DEVICE, "numpy"])
def backend(request):
    """Run the test once on the device backend (``sim`` without a GPU) and once on the NumPy references."""
    with nbcoll.use_backend(request.param):
        yield request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def runs_on_cuda(item) -> bool:
    """Whether a test uses the GPU: its ``backend`` fixture's parameter, or else this process's device backend."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("backend", DEVICE) == "cuda"


SLOWEST_FILES = (
    "test_collectives.py", "test_comm_mpi.py", "test_benchmarks.py", "test_direct_faults.py", "test_tutorial_12.py",
    "test_data_parallel.py", "test_model_parallel.py", "test_docs.py", "test_comm_reliability.py", "test_launch.py",
    "test_benchmarks_lab.py", "test_device_comm.py", "test_device_ring_collectives.py",
)  # fmt: skip
"""The files that take longest (``--durations``, 30 to 165 s each on two cores), run first: pytest-xdist's
``--dist loadfile`` hands out files in order, so with the long ones first the workers run out of work together
instead of one waiting for the other's last long file."""


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests run only on cuda; ``sim_only`` tests (and cases) are skipped there, saying why; ``simulator``
    tests, which switch this process to the simulator, only where it started on it (a GPU process cannot). The
    slowest files go first (:data:`SLOWEST_FILES`), each file's tests in their own order, except on a GPU, where
    the order given stands (``benchmarks/gpu_check.sh`` names the device tests first)."""
    if DEVICE != "cuda":
        first = {name: k for k, name in enumerate(SLOWEST_FILES)}
        items.sort(key=lambda item: first.get(item.path.name, len(first)))
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (get_backend() != 'cuda')")
    for item in items:
        if "gpu" in item.keywords and DEVICE != "cuda":
            item.add_marker(skip_gpu)
        if item.get_closest_marker("simulator") is not None and DEVICE != "sim":
            item.add_marker(pytest.mark.skip(reason="the simulator in this process (no GPU)"))
        sim_only = item.get_closest_marker("sim_only")
        if sim_only is not None and runs_on_cuda(item):
            reason = sim_only.kwargs.get("reason") or (sim_only.args[0] if sim_only.args else "")
            item.add_marker(pytest.mark.skip(reason=f"simulator semantics only: {reason}"))


@pytest.fixture
def mpiexec_keeping_survivors(tmp_path, monkeypatch):
    """MPICH's mpiexec kills every rank as soon as one exits early; a test of a peer's death must see what the
    others do."""
    mpiexec = find_mpiexec()
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    if "HYDRA" not in version:
        pytest.skip("needs MPICH's mpiexec (hydra) to keep the other ranks alive when one exits")
    wrapper = tmp_path / "mpiexec"
    wrapper.write_text(f'#!/bin/sh\nexec "{mpiexec}" -disable-auto-cleanup "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("NBCOLL_MPIEXEC", str(wrapper))
