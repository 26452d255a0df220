"""The default floating dtype, and the rule that picks the dtype of an operation between a Tensor and a scalar.

PyTorch's rule, by *category* (bool < integer < floating): a Python or NumPy scalar (or a list) whose category is
higher than the tensor's lifts the result to that category's default dtype; otherwise the tensor's dtype wins::

    int64 tensor  * 0.5            -> float32 (the default floating dtype)
    float16 tensor * 0.5           -> float16
    int32 tensor  + 2              -> int32
    bool tensor   + 1              -> int64
    int tensor    / int            -> float32 (true division never truncates)

Two tensors of different dtypes are refused (convert one first with ``astype``): nothing is promoted silently.

Example::

    from nbcoll.tensors.dtypes import get_default_dtype, set_default_dtype
    set_default_dtype(np.float64)              # Python floats now become float64 tensors
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}
_default_float = np.dtype(np.float32)


def get_default_dtype() -> np.dtype:
    """The dtype of tensors made from Python floats, and of integer results promoted to floating (float32).

    >>> import nbcoll
    >>> nbcoll.get_default_dtype(), nbcoll.tensor([1.0]).dtype
    (dtype('float32'), dtype('float32'))
    """
    return _default_float


def set_default_dtype(dtype: Any) -> None:
    """Make ``dtype`` (float16, float32 or float64) the default floating dtype.

    >>> import numpy as np, nbcoll
    >>> nbcoll.set_default_dtype(np.float64)
    >>> nbcoll.tensor([1.0]).dtype, nbcoll.nn.Linear(2, 2).weight.dtype
    (dtype('float64'), dtype('float64'))
    >>> nbcoll.set_default_dtype(np.float32)           # back to the default
    """
    global _default_float
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"dtype: the default dtype must be a floating dtype (float16/32/64), got {dt}")
    _default_float = dt


def category(dtype: Any) -> int:
    """0 for bool, 1 for integers, 2 for floating dtypes."""
    kind = np.dtype(dtype).kind
    if kind not in _CATEGORY:
        raise TypeError(f"dtype: {np.dtype(dtype)} is not supported (bool, integer or floating only)")
    return _CATEGORY[kind]


def scalar_result_dtype(tensor_dtype: Any, scalar: Any) -> np.dtype:
    """The dtype of ``tensor op scalar``: the tensor's, unless the scalar's category is higher (see above)."""
    tensor_dtype = np.dtype(tensor_dtype)
    scalar_category = category(np.asarray(scalar).dtype)
    if scalar_category <= category(tensor_dtype):
        return tensor_dtype
    return get_default_dtype() if scalar_category == 2 else np.dtype(np.int64)


def true_division_dtype(dtype: Any) -> np.dtype:
    """The dtype ``/`` computes in: floating dtypes stay, bool and integers become the default floating dtype."""
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == "f" else get_default_dtype()


_LOW_PRECISION = frozenset(np.dtype(t) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2))


def refuse_low_precision(op: Any, tensors: Any) -> None:
    """Raise ``TypeError`` naming ``op`` when one of ``tensors`` (Tensors or None) is bfloat16 or fp8, unless
    ``op`` takes them.

    Those dtypes are for storage, ``astype`` and the collectives; an op that computes on them says so with a
    class attribute ``takes_low_precision = True``. Every ``Function.apply`` asks this first.

    >>> import nbcoll
    >>> x = nbcoll.tensor([1.0, 2.0]).astype(nbcoll.bfloat16)
    >>> x.exp()
    Traceback (most recent call last):
        ...
    TypeError: Exp: bfloat16 tensors are stored, not computed on; call astype(float32) first
    """
    if getattr(op, "takes_low_precision", False):
        return
    for t in tensors:
        if t is not None and t.dtype in _LOW_PRECISION:
            name = getattr(op, "__name__", op)
            raise TypeError(f"{name}: {t.dtype} tensors are stored, not computed on; call astype(float32) first")


__all__ = ["category", "get_default_dtype", "scalar_result_dtype", "set_default_dtype", "true_division_dtype"]
