"""What nbcoll runs on: the backend, the device, and the versions of nbcoll and of the libraries under it.

This is the first thing to paste into a bug report. From a shell::

    python -m nbcoll info

From Python::

    from nbcoll import info
    report = info.collect()         # {"backend": "sim", "nbcoll": "0.1.0", ..., "device": "CUDA simulator"}
    print(info.format_report(report))
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from importlib import metadata

from nbcoll import backend

NOT_INSTALLED = "not installed"

# report key -> distribution name, as pip knows it (numba.cuda comes from its own distribution, numba-cuda).
_DISTRIBUTIONS = {
    "numba": "numba",
    "numba-cuda": "numba-cuda",
    "numpy": "numpy",
    "mpi4py": "mpi4py",
}

LABELS = {
    "backend": "backend",
    "device": "device",
    "collectives": "collectives",
    "nbcoll": "nbcoll",
    "python": "Python",
    "numba": "numba",
    "numba-cuda": "numba-cuda",
    "numpy": "numpy",
    "mpi4py": "mpi4py",
    "mpi_library": "MPI library",
}
"""Report key -> the label :func:`format_report` prints, in the order it prints them."""


def distribution_version(name: str) -> str:
    """The installed version of the distribution ``name``, or ``"not installed"``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED


def mpi_library_version() -> str:
    """The first line of ``MPI.Get_library_version()`` (for example ``"MPICH Version: 5.0.2"``).

    Importing ``mpi4py.MPI`` initialises MPI in this process, as any MPI program would. A broken MPI
    installation is reported in the text rather than raised: the report exists to diagnose exactly that.
    """
    try:
        from mpi4py import MPI
    except Exception as exc:  # ImportError, or a RuntimeError from a missing libmpi
        return f"unavailable ({type(exc).__name__}: {exc})"
    lines = MPI.Get_library_version().strip().splitlines()
    # MPICH pads its first line ("MPICH Version:      5.0.2"); one space reads better.
    return " ".join(lines[0].split()) if lines else "unknown"


def device_name(name: str | None = None) -> str:
    """The GPU on ``cuda``, ``"CUDA simulator"`` on ``sim``, ``"none (numpy backend)"`` on ``numpy``.

    ``name`` is a backend name; the current backend when omitted. ``cuda`` with no usable GPU gives
    ``"unavailable (...)"`` with the reason, rather than an exception.
    """
    name = name or backend.get_backend()
    if name == "numpy":
        return "none (numpy backend)"
    if name == "sim":
        return "CUDA simulator"
    try:
        gpu = backend.cuda().get_current_device()
    except Exception as exc:  # BackendError without a GPU, or a CUDA driver error
        return f"unavailable ({type(exc).__name__}: {exc})"
    label = gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name)
    major, minor = gpu.compute_capability
    return f"{label} (compute capability {major}.{minor})"


HOST_DRIVEN = "host-driven (NBCOLL_PROTO=device runs each collective a ring kernel serves as one kernel per rank)"


def collective_protocol(env: Mapping[str, str] | None = None, *, backend_name: str | None = None,
                        device_backend: str | None = None, gpus: int | None = None,
                        mps: bool | None = None) -> str:  # fmt: skip
    """Which protocol collectives run with here, and where a device request falls back to the host-driven ring.

    ``env`` is read for ``NBCOLL_PROTO`` (default ``os.environ``); the others default to this process's backend,
    device backend (``cuda`` or ``sim``), GPU count and whether the MPS daemon is there. The communicator makes the
    final choice (:func:`nbcoll.comm.device_collective.world_problem`), from what it alone knows: its ranks.

    >>> collective_protocol({}, backend_name="sim", device_backend="sim")
    'host-driven (NBCOLL_PROTO=device runs each collective a ring kernel serves as one kernel per rank)'
    >>> collective_protocol({"NBCOLL_PROTO": "device"}, backend_name="cuda", device_backend="cuda", gpus=4, mps=False)
    'device kernels (NBCOLL_PROTO=device) on 4 GPU(s); host-driven where ranks share a GPU (no MPS) or are threads \
of one process'
    """
    from nbcoll.comm.config import PROTOS

    env = os.environ if env is None else env
    proto = env.get("NBCOLL_PROTO", "").strip().lower() or "host"
    if proto not in PROTOS:
        return f"unusable: NBCOLL_PROTO: expected one of {', '.join(PROTOS)}, got {proto!r}"
    if proto == "host":
        return HOST_DRIVEN
    backend_name = backend_name or backend.get_backend()
    device_backend = device_backend or backend.device_backend()
    if device_backend == "sim":
        return (
            "device kernels (NBCOLL_PROTO=device) on the CUDA simulator: no GPU here; ranks that are threads of one "
            "process stay host-driven"
        )
    gpus = backend.gpu_count() if gpus is None else gpus
    if gpus == 0:
        return "host-driven: NBCOLL_PROTO=device, but no GPU is usable (NBCOLL_BACKEND=sim runs the kernels simulated)"
    if backend_name == "numpy":
        return "host-driven: the numpy backend's buffers are host memory, which GPU kernels do not read"
    if mps is None:
        from nbcoll.comm.device_collective import mps_visible

        mps = mps_visible()
    if mps:
        return (
            f"device kernels (NBCOLL_PROTO=device) on {gpus} GPU(s), MPS running; host-driven where ranks are threads "
            "of one process"
        )
    return (
        f"device kernels (NBCOLL_PROTO=device) on {gpus} GPU(s); host-driven where ranks share a GPU (no MPS) or "
        "are threads of one process"
    )


def collect() -> dict[str, str]:
    """Everything the report shows, as strings, keyed as in :data:`LABELS`.

    ``for key in LABELS: report[key] = <what this process runs on or with>``
    """
    import nbcoll

    report = {
        "backend": backend.get_backend(),
        "device": device_name(),
        "collectives": collective_protocol(),
        "nbcoll": nbcoll.__version__,
        "python": platform.python_version(),
    }
    for key, distribution in _DISTRIBUTIONS.items():
        report[key] = distribution_version(distribution)
    report["mpi_library"] = mpi_library_version()
    return {key: report[key] for key in LABELS}


def format_report(report: dict[str, str]) -> str:
    """One ``label: value`` line per entry of ``report``, labels aligned."""
    labels = {key: LABELS.get(key, key) + ":" for key in report}
    width = max(map(len, labels.values()), default=0)
    return "\n".join(f"{labels[key]:<{width}} {value}" for key, value in report.items())


def print_report() -> None:
    """Print :func:`collect`'s report."""
    print(format_report(collect()))
