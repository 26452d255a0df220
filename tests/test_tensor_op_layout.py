"""Each Tensor operation is reachable from one place: the module of its family in ``nbcoll.tensors.ops``.

What is checked, on the live classes and the source (numpy backend, nothing heavier than doctests):

* every method and property of ``Tensor`` is written either in the core (``nbcoll/tensors/tensor.py``) or in one
  of the few modules that add to it: the op modules, the engine (``backward``) and interop (``__dlpack__``);
* every ``Function`` a method applies (directly, through a closure, or through helpers of its own module) is
  defined in the method's module, or in a module that the method's module docstring names;
* every kernel module an op module's Functions call is named in that module's docstring;
* every ``F.*`` name is written in an op module (or, for the losses, in ``nbcoll.functional`` itself), and in the
  same module as the Tensor method of the same name;
* the core imports no operation, and ``function.py`` imports nothing above the core (no import back up), and the
  examples of every module that adds to Tensor run.
"""

from __future__ import annotations

import ast
import doctest
import inspect
import types

import test_import_graph as graph

import nbcoll
import nbcoll.functional as F
from nbcoll.tensors.function import Function
from nbcoll.tensors.tensor import Tensor

CORE = "nbcoll.tensors.tensor"
OPS = "nbcoll.tensors.ops."
OTHERS = {"nbcoll.tensors.engine": {"backward"}, "nbcoll.interop": {"__dlpack__", "__dlpack_device__"}}


def _members() -> dict[str, types.FunctionType]:
    """Tensor's own methods and property getters, by name."""
    found = {}
    for name, value in vars(Tensor).items():
        function = value.fget if isinstance(value, property) else value
        if inspect.isfunction(function):
            found[name] = function
    return found


def _module_of(function: types.FunctionType) -> str:
    return function.__module__


def _functions_applied(function: types.FunctionType, seen: set[int] | None = None) -> set[type]:
    """The Function classes ``function`` refers to, directly, through its closure, or through the functions of
    its own module that it calls (followed recursively)."""
    seen = set() if seen is None else seen
    if id(function) in seen:
        return set()
    seen.add(id(function))
    refs = inspect.getclosurevars(function)
    found: set[type] = set()
    for value in (*refs.globals.values(), *refs.nonlocals.values()):
        if inspect.isclass(value) and issubclass(value, Function) and value is not Function:
            found.add(value)
        elif inspect.isfunction(value) and value.__module__ == function.__module__:
            found |= _functions_applied(value, seen)
    return found


def _kernel_modules(cls: type) -> set[str]:
    """The ``nbcoll.kernels`` modules that a Function's forward and backward call."""
    found = set()
    for method in (cls.forward, cls.backward):
        for value in inspect.getclosurevars(method).globals.values():
            name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", "")
            if name.startswith("nbcoll.kernels."):
                found.add(name)
    return found


def test_every_tensor_method_lives_in_the_core_or_in_a_module_that_adds_to_tensor():
    misplaced = {}
    for name, function in _members().items():
        module = _module_of(function)
        if module == CORE or module.startswith(OPS) or name in OTHERS.get(module, ()):
            continue
        misplaced[name] = module
    assert not misplaced, f"Tensor members written outside the core and the op modules: {misplaced}"
    by_module = {_module_of(f) for f in _members().values()}
    assert {"nbcoll.tensors.ops.arithmetic", "nbcoll.tensors.ops.reduce", "nbcoll.tensors.engine"} <= by_module


def test_the_functions_a_method_applies_are_in_its_module_or_named_by_it():
    checked = 0
    for name, function in _members().items():
        module = _module_of(function)
        if not module.startswith(OPS):
            continue
        doc = inspect.getmodule(function).__doc__ or ""
        applied = _functions_applied(function)
        far = {c.__qualname__: c.__module__ for c in applied if c.__module__ != module and c.__module__ not in doc}
        assert not far, f"Tensor.{name} ({module}) applies Functions of modules its docstring does not name: {far}"
        checked += bool(applied)
    assert checked >= 30, f"only {checked} methods seen applying a Function: is the walk still finding them?"


def test_op_module_docstrings_name_the_kernel_modules_they_call():
    modules = {inspect.getmodule(f) for f in _members().values() if _module_of(f).startswith(OPS)}
    modules |= {nbcoll.tensors.ops.conv, nbcoll.tensors.ops.nn, nbcoll.tensors.ops.special}
    unnamed = {}
    for module in modules:
        functions = [v for v in vars(module).values() if inspect.isclass(v) and issubclass(v, Function)]
        kernels = set().union(*(_kernel_modules(c) for c in functions if c.__module__ == module.__name__))
        missing = {k for k in kernels if k not in (module.__doc__ or "")}
        if missing:
            unnamed[module.__name__] = sorted(missing)
    assert not unnamed, f"op modules whose docstring does not name the kernel modules they call: {unnamed}"


def test_every_functional_form_is_beside_its_tensor_method():
    methods = _members()
    apart = {}
    for name in F.__all__:
        module = getattr(F, name).__module__
        assert module.startswith(OPS) or module == "nbcoll.functional", f"F.{name} is written in {module}"
        if name in methods and _module_of(methods[name]) != module:
            apart[name] = (module, _module_of(methods[name]))
    assert not apart, f"F.* forms written apart from the Tensor method of the same name: {apart}"
    assert F.exp is Tensor.exp and F.sum is Tensor.sum  # one function where the two forms take the same arguments


def _imported_by(module: str) -> set[str]:
    """The nbcoll modules ``module`` imports, by the rules of the import-graph test (which finds the circles)."""
    tree = ast.parse(graph.MODULES[module].read_text())
    return set().union(*(graph._targets(module, node) for node in graph._imports(tree)))


def test_the_core_and_function_import_no_operation():
    above = ("nbcoll.tensors.ops", "nbcoll.tensors.engine", "nbcoll.tensors.function", "nbcoll.interop")
    assert {"nbcoll.tensors.arrays", "nbcoll.tensors.dtypes"} <= _imported_by(CORE)
    assert not {m for m in _imported_by(CORE) if m.startswith(above)}, _imported_by(CORE)
    assert CORE in _imported_by("nbcoll.tensors.function")
    assert not {m for m in _imported_by("nbcoll.tensors.function") if m.startswith(above)}


def test_the_examples_of_every_module_that_adds_to_tensor_run():
    modules = sorted({inspect.getmodule(f) for f in _members().values()}, key=lambda m: m.__name__)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    with nbcoll.use_backend("numpy"):
        for module in modules:
            for test in doctest.DocTestFinder().find(module):
                runner.run(test, out=report.append)
    assert runner.tries > 100 and runner.failures == 0, "".join(report)
