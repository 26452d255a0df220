"""nbcoll: NCCL-style collectives, GPU kernels and distributed training, readable in Python.

Example::

    import numpy as np, nbcoll
    print(nbcoll.get_backend())                     # "cuda", "sim" or "numpy"
    x = nbcoll.to_device(np.arange(4, dtype=np.float32))
    nbcoll.to_host(x)
"""

# The backend module must be imported before anything imports numba.cuda: it decides whether the simulator is on.
from nbcoll.backend import BACKENDS, BackendError, get_backend, set_backend, use_backend  # isort: skip
from nbcoll.memory import DTYPES, empty, to_device, to_host, zeros

from nbcoll import autograd, functional  # isort: skip
from nbcoll.tensors import Tensor, no_grad, tensor  # isort: skip

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "DTYPES",
    "BackendError",
    "Tensor",
    "autograd",
    "functional",
    "no_grad",
    "tensor",
    "empty",
    "get_backend",
    "set_backend",
    "to_device",
    "to_host",
    "use_backend",
    "zeros",
]
