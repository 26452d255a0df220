"""The floating dtype that new parameters get: float32 unless ``set_default_dtype`` says otherwise.

Example::

    import numpy as np, nbcoll
    nbcoll.set_default_dtype(np.float64)       # gradient checks want float64
    nbcoll.nn.Linear(3, 2).weight.dtype        # dtype('float64')
    nbcoll.set_default_dtype(np.float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

FLOATING = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))

_state = {"dtype": np.dtype(np.float32)}


def get_default_dtype() -> np.dtype:
    """The dtype of parameters that layers and initialisers create."""
    return _state["dtype"]


def set_default_dtype(dtype: Any) -> None:
    """Make ``dtype`` (float16, float32 or float64) the dtype of newly created parameters."""
    try:
        chosen = np.dtype(dtype)
    except TypeError:
        chosen = None
    if chosen not in FLOATING:
        raise TypeError(f"dtype: expected float16, float32 or float64, got {dtype!r}")
    _state["dtype"] = chosen


__all__ = ["get_default_dtype", "set_default_dtype"]
