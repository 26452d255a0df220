"""The ``>>>`` examples in the docstrings of the modules below run, on the numpy backend, and print what they show.

A module joins the list once its examples are written as doctests (``>>>`` lines followed by their output, each
example self-contained). ``NBCOLL_BACKEND=numpy python -m pytest --doctest-modules nbcoll/memory.py`` runs one
module's examples the same way.
"""

import doctest
import importlib

import pytest

import nbcoll

MODULES = [
    "nbcoll.memory",
    "nbcoll.seed",
    "nbcoll.kernels.combine",
    "nbcoll.kernels.copy",
    "nbcoll.kernels.elementwise",
    "nbcoll.kernels.index",
    "nbcoll.kernels.matmul",
    "nbcoll.kernels.reduce_axes",
    "nbcoll.kernels.reduction",
    "nbcoll.kernels.softmax",
    "nbcoll.kernels.stencil",
    "nbcoll.kernels.transpose",
    "nbcoll.tensors.grad_mode",
    "nbcoll.tensors.tensor",
    "nbcoll.autograd.gradcheck",
    "nbcoll.comm.loopback",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{name}: no >>> examples found"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    with nbcoll.use_backend("numpy"):
        for test in tests:
            runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
