"""Helpers shared by test files that run nbcoll's own scripts (tutorials, command lines) in a fresh process."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"


def run_python(args: list[str], backend: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python args...`` with ``NBCOLL_BACKEND=backend``, in a process whose simulator setting is its own."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = backend
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)


# Compiles each registered kernel of a tutorial to PTX for sm_90, reading it from the source: the tutorials launch
# kernels as soon as they are imported, which the cuda backend cannot do without a GPU. The module's upper-case
# constants are evaluated first (those that need more than NumPy and Numba are skipped), then each kernel.
_COMPILE_TUTORIAL_KERNELS = """
import ast, sys
import numpy as np
from numba import cuda

tree = ast.parse(open(sys.argv[1]).read())
namespace = {"cuda": cuda, "np": np}
compiled = 0
for node in tree.body:
    constant = isinstance(node, ast.Assign) and all(
        isinstance(t, ast.Name) and t.id.isupper() and t.id != "BACKEND" for t in node.targets
    )
    if constant:
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), sys.argv[1], "exec"), namespace)
        except Exception:
            pass
    if not isinstance(node, ast.FunctionDef):
        continue
    names = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
    if "cuda.jit" not in names:
        continue
    assert "register" in names, node.name + " is a kernel without @register"
    signatures = [ast.literal_eval(arg) for arg in node.decorator_list[names.index("register")].args]
    node.decorator_list = []
    exec(compile(ast.Module(body=[node], type_ignores=[]), sys.argv[1], "exec"), namespace)
    for signature in signatures:
        ptx, _ = cuda.compile_ptx(namespace[node.name], signature, cc=(9, 0))
        assert ".entry" in ptx, node.name
        compiled += 1
        print("ok", node.name, signature)
print("compiled", compiled)
"""


def compile_tutorial_kernels(tutorial: Path) -> subprocess.CompletedProcess:
    """Compile every ``@register``-ed kernel of ``tutorial`` to PTX in a process without the simulator; its
    output ends with ``compiled N``."""
    return run_python(["-c", _COMPILE_TUTORIAL_KERNELS, str(tutorial)], "cuda")
