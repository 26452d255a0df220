"""torch tensors as nbcoll device arrays, without a copy where the memory allows, and torch's reduction ops.

A collective of the torch backend hands nbcoll the memory of each tensor itself::

    CPU tensor, contiguous       tensor.numpy(): a NumPy view of the same memory (the ``numpy`` backend)
    CUDA tensor, contiguous      its ``__cuda_array_interface__``: a Numba view of the same memory (``cuda``)
    not contiguous               a contiguous copy, written back into the tensor once the collective is done
    CPU tensor on sim or cuda    a device copy, written back the same way (each backend computes on its arrays)

Example::

    staged = as_array(tensor, "tensor")         # staged.array is a flat view of tensor's memory
    comm.all_reduce(staged.array)
    staged.write_back()                          # a no-op for a contiguous CPU tensor on numpy
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nbcoll import backend, memory

RedOp = dist.ReduceOp.RedOpType
REDUCE_OPS = {RedOp.SUM: "sum", RedOp.PRODUCT: "prod", RedOp.MIN: "min", RedOp.MAX: "max", RedOp.AVG: "avg"}
"""torch's reduction ops that nbcoll's collectives compute, and nbcoll's name for each."""

DTYPES = {
    torch.int8: np.int8, torch.uint8: np.uint8, torch.int32: np.int32, torch.uint32: np.uint32,
    torch.int64: np.int64, torch.uint64: np.uint64, torch.float16: np.float16, torch.float32: np.float32,
    torch.float64: np.float64, torch.bool: np.bool_,
    torch.bfloat16: memory.bfloat16, torch.float8_e4m3fn: memory.float8_e4m3fn, torch.float8_e5m2: memory.float8_e5m2,
}  # fmt: skip
"""The torch dtypes nbcoll moves, and their NumPy dtype (``bool`` is moved, never reduced; the low-precision ones
are ``ml_dtypes``' types, as nbcoll's own arrays hold them)."""

WORDS = {torch.bfloat16: torch.uint16, torch.float8_e4m3fn: torch.uint8, torch.float8_e5m2: torch.uint8}
"""torch cannot hand a low-precision tensor to NumPy or ``__cuda_array_interface__``: its memory is handed over as
these unsigned words instead, and viewed back as the ``ml_dtypes`` type, still without a copy."""


def reduce_op(op: Any) -> str:
    """nbcoll's name of torch's ``op``, or a ``ValueError`` naming the op nbcoll does not compute.

    >>> import torch.distributed as dist
    >>> reduce_op(dist.ReduceOp.AVG), reduce_op(dist.ReduceOp.PRODUCT)
    ('avg', 'prod')
    >>> reduce_op(dist.ReduceOp.BAND)
    Traceback (most recent call last):
        ...
    ValueError: nbcoll backend: ReduceOp.BAND is not supported; expected SUM, PRODUCT, MIN, MAX or AVG
    """
    kind = getattr(op, "op", op)  # a ReduceOp object holds its RedOpType; dist.ReduceOp.SUM is one
    if kind not in REDUCE_OPS:
        raise ValueError(
            f"nbcoll backend: ReduceOp.{getattr(kind, 'name', kind)} is not supported; expected SUM, PRODUCT, "
            "MIN, MAX or AVG"
        )
    return REDUCE_OPS[kind]


@dataclass
class Staged:
    """A tensor as a flat nbcoll array, and what makes the tensor hold the array's values once they are final."""

    tensor: torch.Tensor
    array: Any
    write_back: Callable[[], None]


def _nothing() -> None:
    pass


def numpy_dtype(tensor: torch.Tensor, arg: str, reduced: bool = False) -> np.dtype:
    """The NumPy dtype of ``tensor``'s elements, or a ``TypeError`` naming ``arg`` and its dtype.

    >>> numpy_dtype(torch.zeros(2, dtype=torch.float16), "tensor")
    dtype('float16')
    >>> numpy_dtype(torch.zeros(2, dtype=torch.bfloat16), "tensor")
    dtype(bfloat16)
    >>> numpy_dtype(torch.zeros(2, dtype=torch.cfloat), "tensor")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    TypeError: nbcoll backend: tensor has dtype torch.complex64, which nbcoll does not support; expected one of ...
    """
    found = DTYPES.get(tensor.dtype)
    if found is None or (reduced and found is np.bool_):
        names = ", ".join(str(t).removeprefix("torch.") for t in DTYPES if t is not torch.bool)
        raise TypeError(
            f"nbcoll backend: {arg} has dtype {tensor.dtype}, which nbcoll does not support; expected one of "
            f"{names}" + ("" if reduced else " (bool where nothing is reduced)")
        )
    return np.dtype(found)


def as_array(tensor: torch.Tensor, arg: str, reduced: bool = False) -> Staged:
    """``tensor``'s memory as a flat array of the current nbcoll backend (see the module's table).

    >>> import nbcoll
    >>> t = torch.arange(6.0).reshape(2, 3)
    >>> with nbcoll.use_backend("numpy"):
    ...     staged = as_array(t, "tensor")
    >>> staged.array[4] = -1.0                  # the same memory: the tensor sees it
    >>> t[1, 1].item()
    -1.0
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"nbcoll backend: {arg}: expected a torch.Tensor, got {type(tensor).__name__}")
    dtype = numpy_dtype(tensor, arg, reduced)
    current = backend.get_backend()
    source = tensor.detach()
    contiguous = source if source.is_contiguous() else source.contiguous()
    words = contiguous.view(WORDS[tensor.dtype]) if tensor.dtype in WORDS else contiguous
    if tensor.device.type == "cuda":
        if current != "cuda":
            raise RuntimeError(
                f"nbcoll backend: {arg} is a CUDA tensor but nbcoll runs on the {current!r} backend; set "
                "NBCOLL_BACKEND=cuda (or pass CPU tensors)"
            )
        torch.cuda.current_stream(tensor.device).synchronize()  # torch's pending kernels have written it
        array = memory.as_device_array(words, arg).reshape(contiguous.numel()).view(dtype)
        # nbcoll's kernels run on nbcoll's stream: done before torch reads the tensor on its own
        return Staged(tensor, array, lambda: (memory.synchronize(), _copy_into(tensor, contiguous)))
    elif tensor.device.type == "cpu":
        array = words.numpy().reshape(-1).view(dtype)
        if current != "numpy":
            host, array = array, memory.to_device(array)
            return Staged(tensor, array, lambda: (_copy_host(host, array), _copy_into(tensor, contiguous)))
    else:
        raise RuntimeError(f"nbcoll backend: {arg} is on device {tensor.device}; expected a cpu or cuda tensor")
    if contiguous.data_ptr() == source.data_ptr():
        return Staged(tensor, array, _nothing)
    return Staged(tensor, array, lambda: _copy_into(tensor, contiguous))


def _copy_host(host: np.ndarray, device_array: Any) -> None:
    host[...] = memory.to_host(device_array)


def _copy_into(tensor: torch.Tensor, values: torch.Tensor) -> None:
    if values.data_ptr() != tensor.data_ptr():
        with torch.no_grad():
            tensor.copy_(values.view(tensor.shape) if values.is_contiguous() else values)
