"""Every kernel compiles to PTX for sm_90, and every kernel under nbcoll/ is in the registry."""

import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, backend: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = backend
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=900
    )


def test_every_kernel_compiles_to_ptx_for_sm90():
    # A subprocess, because the simulator and compile_ptx cannot share a process.
    proc = _run("import sys, nbcoll.kernels.ptx as p; sys.exit(p.main())", "cuda")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " 0 failed" in proc.stdout
    compiled = int(proc.stdout.strip().splitlines()[-1].split()[0])
    assert compiled >= 30, proc.stdout


def test_numba_cuda_rounds_float16_to_the_nearest_integer_but_truncates_float32():
    # Why cast_into takes a float16 through float32 on its way to an integer: C and NumPy truncate toward zero.
    proc = _run(
        """
        from numba import cuda
        from nbcoll.kernels.copy import copy_kernel
        for signature in ("void(int8[::1], float16[::1])", "void(int8[::1], float32[::1])"):
            ptx, _ = cuda.compile_ptx(copy_kernel.py_func, signature, cc=(9, 0))
            print(signature, sorted({w for w in ptx.split() if w.startswith("cvt.r")}))
        """,
        "cuda",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from_half, from_single = proc.stdout.strip().splitlines()
    assert "cvt.rni." in from_half and "cvt.rzi." not in from_half, from_half
    assert "cvt.rzi." in from_single and "cvt.rni." not in from_single, from_single


def test_every_kernel_is_registered():
    proc = _run(
        """
        import nbcoll.backend  # decides the simulator before numba.cuda is imported
        from numba import cuda

        created = []
        original_jit = cuda.jit

        def recording_jit(*args, **kwargs):
            if kwargs.get("device"):
                return original_jit(*args, **kwargs)
            if args and callable(args[0]):
                dispatcher = original_jit(*args, **kwargs)
                created.append(dispatcher)
                return dispatcher
            decorator = original_jit(*args, **kwargs)

            def record(func):
                dispatcher = decorator(func)
                created.append(dispatcher)
                return dispatcher

            return record

        cuda.jit = recording_jit
        from nbcoll.kernels import all_kernels

        registered = {id(entry.dispatcher) for entry in all_kernels()}
        missing = [d.py_func.__module__ + "." + d.py_func.__name__ for d in created if id(d) not in registered]
        print("created", len(created), "registered", len(registered))
        assert created, "no kernel was created: the recording hook did not see the package's imports"
        assert not missing, "kernels missing from the registry: " + ", ".join(missing)
        """,
        "sim",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["kernels.elementwise.unary_exp", "kernels.elementwise.binary_add"])
def test_registry_entries_expose_name_py_func_and_signatures(name):
    from nbcoll.kernels import all_kernels

    entry = {e.name: e for e in all_kernels()}[name]
    assert callable(entry.py_func)
    assert entry.signatures and all(s.startswith("void(") for s in entry.signatures)


def test_the_ptx_workers_import_nbcoll_without_starting_mpi():
    """A forked worker ends without finalizing MPI: had it started MPI, it would leave MPI's shared memory behind."""
    proc = _run(
        """
        import sys
        from nbcoll.kernels import ptx
        ptx._compile_without_mpi()
        from nbcoll.kernels import all_kernels
        all_kernels()  # imports every module of nbcoll, the communicator's too
        from mpi4py import MPI
        sys.exit(1 if MPI.Is_initialized() else 0)
        """,
        "cuda",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
