"""Shared fixtures: every single-process kernel test runs on the device backend (sim or cuda) and on numpy."""

import numpy as np
import pytest

import nbcoll
from nbcoll.backend import device_backend

DEVICE = device_backend()


@pytest.fixture(params=[DEVICE, "numpy"])
def backend(request):
    """Run the test once on the device backend (``sim`` without a GPU) and once on the NumPy references."""
    with nbcoll.use_backend(request.param):
        yield request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def pytest_collection_modifyitems(config, items):
    if DEVICE == "cuda":
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (get_backend() != 'cuda')")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
