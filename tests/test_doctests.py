"""Every public name of nbcoll has a docstring with a ``>>>`` example, and every example runs on numpy.

A *public name* is a function or class listed in ``__all__`` of one of nbcoll's public packages
(:data:`PUBLIC_PACKAGES`), and every public method or property of such a class, including those it inherits from
nbcoll's own base classes. A method that overrides a documented one and has no docstring of its own shows the
example of the method it overrides (``inspect.getdoc`` finds it), so ``Linear.forward`` is covered by
``Module.forward`` unless it says something of its own. Constants and submodules are not names that can carry an
example of their own.

The examples run as doctests on the numpy backend, in one process, without mpiexec: a multi-rank API shows its
example on a world of one rank. ``NBCOLL_BACKEND=numpy python -m pytest --doctest-modules nbcoll/memory.py`` runs
one module's examples the same way.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import warnings

import pytest

import nbcoll

PUBLIC_PACKAGES = [
    "nbcoll",
    "nbcoll.autograd",
    "nbcoll.comm",
    "nbcoll.data",
    "nbcoll.datasets",
    "nbcoll.functional",
    "nbcoll.kernels",
    "nbcoll.nn",
    "nbcoll.nn.init",
    "nbcoll.optim",
    "nbcoll.parallel",
    "nbcoll.parallel.functional",
    "nbcoll.perf",
    "nbcoll.tensors",
    "nbcoll.utils",
]

# Modules whose examples run although none of their names is public: the kernels' launch functions and others.
MORE_MODULES = [
    "nbcoll.memory",
    "nbcoll.seed",
    "nbcoll.simulated_blocks",
    "nbcoll.kernels.batched_copy",
    "nbcoll.kernels.combine",
    "nbcoll.kernels.copy",
    "nbcoll.kernels.elementwise",
    "nbcoll.kernels.index",
    "nbcoll.kernels.index_args",
    "nbcoll.kernels.ll",
    "nbcoll.kernels.lookup",
    "nbcoll.kernels.matmul",
    "nbcoll.kernels.reduce_axes",
    "nbcoll.kernels.reduction",
    "nbcoll.kernels.scale",
    "nbcoll.kernels.softmax",
    "nbcoll.kernels.stencil",
    "nbcoll.kernels.transpose",
    "nbcoll.kernels.widen",
    "nbcoll.tensors.grad_mode",
    "nbcoll.comm.loopback",
]


def public_names() -> dict[str, object]:
    """``{"nbcoll.nn.Linear": Linear, "nbcoll.nn.Module.parameters": <function>, ...}``, each object once."""
    found: dict[str, object] = {}
    seen: set[int] = set()
    classes = []
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            found[f"{package}.{name}"] = obj
            if inspect.isclass(obj):
                classes.append((f"{package}.{name}", obj))
    public_classes = {obj for _, obj in classes}
    for qualified, cls in classes:
        # A member inherited through a public base (even from that base's own mixin) is listed under that base.
        public_bases = [base for base in cls.__mro__[1:] if base in public_classes]
        for owner in cls.__mro__:
            inherited = any(owner in base.__mro__ for base in public_bases)
            if not owner.__module__.startswith("nbcoll") or (owner is not cls and inherited):
                continue
            for name, member in vars(owner).items():
                routine = isinstance(member, property | staticmethod | classmethod) or inspect.isfunction(member)
                if name.startswith("_") or not routine:
                    continue
                function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if id(function) in seen or f"{qualified}.{name}" in found:
                    continue
                seen.add(id(function))
                found[f"{qualified}.{name}"] = (cls, name)
    return found


def docstring_of(obj: object) -> str:
    if isinstance(obj, tuple):
        cls, name = obj
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            return member.__doc__ or ""
        return inspect.getdoc(getattr(cls, name)) or ""
    return inspect.getdoc(obj) or ""


def test_every_public_name_has_an_example():
    names = public_names()
    missing = [name for name, obj in names.items() if ">>>" not in docstring_of(obj)]
    assert len(names) > 300, f"only {len(names)} public names found: is __all__ still read?"
    for inherited_or_property in ("nbcoll.Communicator.all_reduce", "nbcoll.nn.Module.parameters", "nbcoll.Tensor.T"):
        assert inherited_or_property in names, f"{inherited_or_property}: not enumerated as a public name"
    assert not missing, f"{len(missing)} of {len(names)} public names lack a docstring with a >>> example:\n" + (
        "\n".join(missing)
    )


def modules_with_examples() -> list[str]:
    """The modules that define a public name, and :data:`MORE_MODULES`."""
    modules = dict.fromkeys(MORE_MODULES)
    for obj in public_names().values():
        if isinstance(obj, tuple):  # a member: the module of the class in the MRO that defines it
            cls, name = obj
            obj = next(owner for owner in cls.__mro__ if name in vars(owner))
        modules.setdefault(obj.__module__)
    return sorted(modules)


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{name}: no >>> examples found"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    with nbcoll.use_backend("numpy"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a one-rank communicator warns that it is alone: expected here
        for test in tests:
            runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
