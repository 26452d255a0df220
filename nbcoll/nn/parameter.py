"""``Parameter``: a Tensor that a Module trains, registered by assigning it to a Module attribute.

Example::

    import numpy as np
    from nbcoll.nn import Module, Parameter

    class Scale(Module):
        def __init__(self):
            super().__init__()
            self.factor = Parameter(np.ones(3, np.float32))     # listed by parameters(), saved by state_dict()

        def forward(self, x):
            return x * self.factor
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll import backend, memory
from nbcoll.tensors import Tensor
from nbcoll.tensors.arrays import from_host


class Parameter(Tensor):
    """A leaf Tensor that requires grad (unless told otherwise), recognised by ``Module.__setattr__``.

    A Tensor given as ``data`` is wrapped without a copy, as PyTorch's ``Parameter(t)`` shares ``t``'s storage.

    Example::

        >>> import numpy as np
        >>> from nbcoll import nn
        >>> w = nn.Parameter(np.zeros((2, 3), np.float32))
        >>> w.requires_grad, w.is_leaf, w.shape
        (True, True, (2, 3))
    """

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        if isinstance(data, Tensor):
            self._init(data.data, None)  # the same device array, as a new leaf
            self.requires_grad = requires_grad
        else:
            super().__init__(data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


def copy_tensor(source: Tensor) -> Tensor:
    """A new leaf of the same class (Parameter or Tensor) with a copy of ``source``'s values and gradient.

    The values travel through the host: a device array of the simulator or of a GPU cannot be deep-copied as a
    Python object, and one copy each way is what a model copy costs anyway.
    """
    if isinstance(source, Parameter):
        copied: Tensor = Parameter(from_host(source.numpy()), requires_grad=source.requires_grad)
    else:
        copied = Tensor(from_host(source.numpy()), requires_grad=source.requires_grad and source.is_leaf)
    if source.grad is not None:
        copied.grad = Tensor(from_host(source.grad.numpy()))
    return copied


def write_values(target: Tensor, values: Any) -> None:
    """Overwrite the elements of ``target`` with ``values`` (host data of its shape), keeping its device array.

    Whoever holds ``target.data`` (an optimizer, a gradient bucket) sees the new values. The values travel as one
    host-to-device copy, converted to ``target``'s dtype.
    """
    host = np.ascontiguousarray(values, dtype=target.dtype)
    if host.shape != target.shape:
        raise ValueError(f"values: expected shape {target.shape}, got {host.shape}")
    array = target.data
    if not memory.is_contiguous(array):
        target.data = from_host(host)
    elif backend.get_backend() == "numpy":
        array[...] = host
    else:
        array.copy_to_device(host.reshape(tuple(array.shape)))


__all__ = ["Parameter", "copy_tensor", "write_values"]
