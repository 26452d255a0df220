"""``autocast``: inside it, products run in a low dtype (float16 or bfloat16) and numerically touchy ops in float32.

PyTorch's op lists are the model. Under ``with nbcoll.autocast(dtype):`` an op's floating arguments are cast
with ``Tensor.astype`` (recorded, so the gradient flows back in each argument's own dtype) by the op's list::

    low dtype:  matmul and ``@`` (so Linear, batched matmul, and Conv2d, which is im2col then one product)
    float32:    sum, mean, softmax, log_softmax, layer_norm, exp, log, pow (so cross_entropy, NLL and MSE losses,
                whose reductions and log-softmax are these ops)

Every other op runs in the dtype of its arguments, except that bfloat16 ones are widened to float32 (nbcoll stores
bfloat16 but computes only products on it); two floating Tensors of different dtypes meet in the wider (PyTorch's
type promotion: a low-dtype product plus a float32 bias is float32). float64 arguments are never cast.
The parameters stay float32 (the masters): their low-dtype copies exist only inside the ops, so their gradients
arrive in float32 and the optimizer steps the masters. The casts are made where ``Function.apply`` dispatches
an op (``nbcoll.tensors.autocast_state``), the one hook; nothing else in the ops knows of autocast.

bfloat16: the matmul kernels take float16 (they accumulate it in float32) but not bfloat16, so a bfloat16
product is computed as tensor cores do: inputs rounded to bfloat16, the product accumulated in float32, the result
rounded to bfloat16 (:class:`~nbcoll.amp.bfloat16_matmul.BFloat16MatMul`).

Example::

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    with nbcoll.autocast(dtype=nbcoll.bfloat16):
        loss = F.cross_entropy(model(x), y)         # products in bfloat16, log_softmax and mean in float32
    loss.backward()                                 # outside autocast, as in PyTorch
    optimizer.step()                                # float32 gradients, float32 parameters
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from nbcoll.amp.bfloat16_matmul import BFloat16MatMul
from nbcoll.tensors.autocast_state import set_active_autocast
from nbcoll.tensors.ops.arithmetic import Pow
from nbcoll.tensors.ops.elementwise import Exp, Log
from nbcoll.tensors.ops.matmul import MatMul
from nbcoll.tensors.ops.nn import LayerNorm
from nbcoll.tensors.ops.reduce import Mean, Sum
from nbcoll.tensors.ops.softmax import LogSoftmax, Softmax
from nbcoll.tensors.tensor import Tensor

LOW_PRECISION_OPS: tuple[type, ...] = (MatMul,)
FLOAT32_OPS: tuple[type, ...] = (Sum, Mean, Softmax, LogSoftmax, LayerNorm, Exp, Log, Pow)

FLOAT32 = np.dtype(np.float32)


def is_autocast_dtype(dtype: Any) -> bool:
    """True for float16 and bfloat16, the dtypes autocast computes in.

    >>> import numpy as np
    >>> from nbcoll.amp.autocast import is_autocast_dtype
    >>> is_autocast_dtype(np.float16), is_autocast_dtype(np.float32)
    (True, False)
    """
    dtype = np.dtype(dtype)
    return dtype == np.float16 or dtype.name == "bfloat16"


def _is_bfloat16(dtype: np.dtype) -> bool:
    return dtype.name == "bfloat16"


def _castable(dtype: np.dtype) -> bool:
    return dtype == FLOAT32 or is_autocast_dtype(dtype)  # float64 and integers are never cast


class autocast:  # noqa: N801 - PyTorch's name
    """Run the ops in ``with autocast(dtype):`` by the lists of the module docstring; also a decorator.

    Example::

        >>> import numpy as np, nbcoll
        >>> w = nbcoll.tensor(np.ones((3, 2), np.float32), requires_grad=True)
        >>> x = nbcoll.tensor(np.ones((4, 3), np.float32))
        >>> with nbcoll.autocast(dtype=np.float16):
        ...     y = x @ w                          # float16
        ...     loss = y.sum()                     # float32
        >>> y.dtype, loss.dtype
        (dtype('float16'), dtype('float32'))
        >>> loss.backward()
        >>> w.grad.dtype                           # the master's dtype
        dtype('float32')

    ``enabled=False`` turns autocast off inside (also inside an enclosing autocast), as in PyTorch.
    """

    def __init__(self, dtype: Any = np.float16, enabled: bool = True) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled: expected True or False, got {enabled!r}")
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype: expected float16 or bfloat16, got {dtype!r}") from None
        if not is_autocast_dtype(dtype):
            raise TypeError(f"dtype: expected float16 or bfloat16, got {dtype}")
        self.dtype, self.enabled = dtype, enabled
        self._previous: list[Any] = []  # a stack, so one object can be entered again inside itself

    def __enter__(self) -> autocast:
        self._previous.append(set_active_autocast(self if self.enabled else None))
        return self

    def __exit__(self, *exc: Any) -> None:
        set_active_autocast(self._previous.pop())

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.dtype, self.enabled):
                return fn(*args, **kwargs)

        return wrapper

    def route(self, function: type, args: tuple[Any, ...]) -> tuple[type, tuple[Any, ...]]:
        """The op to run and its arguments, cast by the lists (``Function.apply`` calls this).

        >>> import numpy as np, nbcoll
        >>> from nbcoll.tensors.ops.softmax import Softmax
        >>> x = nbcoll.tensor(np.ones(2, np.float16))
        >>> _, (cast, axis) = nbcoll.autocast().route(Softmax, (x, -1))
        >>> cast.dtype, axis
        (dtype('float32'), -1)
        """
        if function in LOW_PRECISION_OPS:
            args = tuple(_cast(a, self.dtype) for a in args)
            if function is MatMul and self.dtype.name == "bfloat16":
                function = BFloat16MatMul
        elif function in FLOAT32_OPS or not getattr(function, "takes_low_precision", False):
            # float32 ops widen float16 and bfloat16; any other op widens bfloat16 only, which is stored, not
            # computed on (a bfloat16 product feeds a ReLU in float32)
            widen = is_autocast_dtype if function in FLOAT32_OPS else _is_bfloat16
            args = tuple(_cast(a, FLOAT32) if isinstance(a, Tensor) and widen(a.dtype) else a for a in args)
        return function, args

    def promote(self, a: Any, b: Any) -> np.dtype | None:
        """The dtype two floating operands of different dtypes meet in (the wider); None if either is not floating.

        >>> import numpy as np, nbcoll
        >>> nbcoll.autocast().promote(np.float16, np.float32), nbcoll.autocast().promote(np.float16, np.int64)
        (dtype('float32'), None)
        """
        a, b = np.dtype(a), np.dtype(b)
        if not all(d.kind == "f" or is_autocast_dtype(d) for d in (a, b)):
            return None
        if np.dtype(np.float64) in (a, b):
            return np.dtype(np.float64)
        return FLOAT32

    def __repr__(self) -> str:
        return f"autocast(dtype={self.dtype}, enabled={self.enabled})"


def _cast(a: Any, dtype: np.dtype) -> Any:
    if isinstance(a, Tensor) and a.dtype != dtype and _castable(a.dtype):
        return a.astype(dtype)
    return a


__all__ = ["autocast", "is_autocast_dtype"]
