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


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests run only on cuda; ``sim_only`` tests (and cases) are skipped there, saying why; ``simulator``
    tests, which switch this process to the simulator, only where it started on it (a GPU process cannot)."""
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
