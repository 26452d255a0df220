"""nbcoll: NCCL-style collectives, GPU kernels and distributed training, readable in Python.

Example::

    import numpy as np, nbcoll
    print(nbcoll.get_backend())                     # "cuda", "sim" or "numpy"
    x = nbcoll.to_device(np.arange(4, dtype=np.float32))
    nbcoll.to_host(x)
"""

# The backend module must be imported before anything imports numba.cuda: it decides whether the simulator is on.
from nbcoll.backend import BACKENDS, BackendError, get_backend, set_backend, use_backend  # isort: skip
from nbcoll.memory import bfloat16, float8_e4m3fn, float8_e5m2  # isort: skip
from nbcoll.memory import DTYPES, empty, synchronize, to_device, to_host, zeros

from nbcoll import autograd, functional  # isort: skip
from nbcoll.tensors import Tensor, no_grad, tensor  # isort: skip
from nbcoll.interop import from_dlpack  # isort: skip
from nbcoll.tensors.dtypes import get_default_dtype, set_default_dtype  # isort: skip
from nbcoll.seed import initial_seed, manual_seed  # isort: skip
from nbcoll import nn  # isort: skip
from nbcoll.serialization import load, save  # isort: skip
from nbcoll import data, datasets, meters, optim  # isort: skip
from nbcoll import amp  # isort: skip
from nbcoll.amp import autocast  # isort: skip

__version__ = "0.1.0"

# The communication layer imports mpi4py, which initialises MPI: load it only when a program asks for it.
_COMM_NAMES = {
    "init": "nbcoll.comm",
    "loopback": "nbcoll.comm",
    "Communicator": "nbcoll.comm",
    "NOCOLOR": "nbcoll.comm",
    "CommError": "nbcoll.comm",
    "CommTimeoutError": "nbcoll.comm",
    "CommAbortedError": "nbcoll.comm",
    "CommPeerLostError": "nbcoll.comm",
    "CommMismatchError": "nbcoll.comm",
    "CollectiveMismatchError": "nbcoll.comm.errors",
    "premul_sum": "nbcoll.kernels.combine",
}


def __getattr__(name: str):
    if name in _COMM_NAMES:
        import importlib

        return getattr(importlib.import_module(_COMM_NAMES[name]), name)
    raise AttributeError(f"module 'nbcoll' has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "DTYPES",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "BackendError",
    "CollectiveMismatchError",
    "CommAbortedError",
    "CommError",
    "CommMismatchError",
    "CommPeerLostError",
    "CommTimeoutError",
    "Communicator",
    "NOCOLOR",
    "init",
    "loopback",
    "data",
    "datasets",
    "load",
    "meters",
    "optim",
    "save",
    "premul_sum",
    "Tensor",
    "amp",
    "autocast",
    "autograd",
    "functional",
    "from_dlpack",
    "get_default_dtype",
    "initial_seed",
    "manual_seed",
    "nn",
    "set_default_dtype",
    "no_grad",
    "tensor",
    "empty",
    "get_backend",
    "set_backend",
    "synchronize",
    "to_device",
    "to_host",
    "use_backend",
    "zeros",
]
