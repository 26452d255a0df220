"""The mixed-precision policy of the data-parallel wrappers: which dtype each part of a step lives in.

FSDP's ``MixedPrecision`` names three dtypes, and DDP, ZeRO and ``fully_shard`` take the same object::

    parameters (float32 masters) --cast--> param_dtype  --forward/backward-->  gradients
    gradients --cast--> reduce_dtype --all-reduce / reduce-scatter--> cast back to the master's dtype
    buffers (running statistics, ...) kept in buffer_dtype

``None`` keeps a part in the dtype it already has, so ``MixedPrecision()`` changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class MixedPrecision:
    """Which dtypes the forward, the gradient reduction and the buffers use; the masters keep their own.

    >>> import numpy as np
    >>> from nbcoll.parallel import MixedPrecision
    >>> policy = MixedPrecision(param_dtype=np.float16, reduce_dtype=np.float32)
    >>> policy.param_dtype, policy.reduce_dtype, policy.buffer_dtype
    (dtype('float16'), dtype('float32'), None)
    """

    param_dtype: Any = None
    reduce_dtype: Any = None
    buffer_dtype: Any = None

    def __post_init__(self) -> None:
        for name in ("param_dtype", "reduce_dtype", "buffer_dtype"):
            value = getattr(self, name)
            if value is None:
                continue
            dt = np.dtype(value)
            if dt.kind != "f" and dt.name not in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
                raise TypeError(f"{name}: expected a floating dtype or None, got {dt}")
            object.__setattr__(self, name, dt)


__all__ = ["MixedPrecision"]
