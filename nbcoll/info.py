"""What nbcoll runs on: the backend, the device, and the versions of nbcoll and of the libraries under it.

This is the first thing to paste into a bug report. From a shell::

    python -m nbcoll info

From Python::

    from nbcoll import info
    report = info.collect()         # {"backend": "sim", "nbcoll": "0.1.0", ..., "device": "CUDA simulator"}
    print(info.format_report(report))
"""

from __future__ import annotations

import platform
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


def collect() -> dict[str, str]:
    """Everything the report shows, as strings, keyed as in :data:`LABELS`.

    ``for key in LABELS: report[key] = <what this process runs on or with>``
    """
    import nbcoll

    report = {
        "backend": backend.get_backend(),
        "device": device_name(),
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
