"""Initialisers: fill a parameter in place with random values whose scale suits the layer (PyTorch's formulas).

The values are drawn on the host from the generator that ``nbcoll.manual_seed`` restarts, then copied into the
parameter's device array, so a seed gives the same model on every backend. For a weight of shape
``(out, in, *kernel)``::

    fan_in  = in  * prod(kernel)          fan_out = out * prod(kernel)
    xavier_uniform_:   bound = gain * sqrt(6 / (fan_in + fan_out))        U(-bound, bound)
    xavier_normal_:    std   = gain * sqrt(2 / (fan_in + fan_out))        N(0, std)
    kaiming_uniform_:  bound = gain * sqrt(3 / fan)                       U(-bound, bound)
    kaiming_normal_:   std   = gain / sqrt(fan)                           N(0, std)

where ``fan`` is ``fan_in`` (keeps the forward variance) or ``fan_out`` (keeps the backward variance), and
``gain`` comes from :func:`calculate_gain`.

Example::

    from nbcoll.nn import init
    layer = nbcoll.nn.Linear(128, 64)
    init.kaiming_normal_(layer.weight, nonlinearity="relu")
    init.zeros_(layer.bias)
"""

from __future__ import annotations

import math

import numpy as np

from nbcoll.nn.parameter import write_values
from nbcoll.seed import host_generator
from nbcoll.tensors import Tensor

GAINS = {
    "linear": 1.0,
    "conv1d": 1.0,
    "conv2d": 1.0,
    "sigmoid": 1.0,
    "tanh": 5.0 / 3,
    "relu": math.sqrt(2.0),
    "selu": 3.0 / 4,
}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The factor by which ``nonlinearity`` shrinks the standard deviation, inverted: ``relu`` gives sqrt(2).

    ``leaky_relu`` takes its negative slope as ``param`` (0.01 when None): ``sqrt(2 / (1 + slope**2))``.

    >>> from nbcoll.nn import init
    >>> round(init.calculate_gain("relu"), 4), init.calculate_gain("tanh")
    (1.4142, 1.6666666666666667)
    """
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in GAINS:
        raise ValueError(f"nonlinearity: expected one of {sorted([*GAINS, 'leaky_relu'])}, got {nonlinearity!r}")
    return GAINS[nonlinearity]


def fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """``(in * receptive field, out * receptive field)`` for a weight of shape ``(out, in, *kernel)``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> init.fan_in_and_fan_out(nbcoll.tensor(np.zeros((16, 3, 5, 5))))      # a Conv2d(3, 16, 5) weight
    (75, 400)
    """
    if tensor.ndim < 2:
        raise ValueError(f"tensor: fan in and fan out need at least 2 dimensions, got shape {tensor.shape}")
    receptive_field = int(np.prod(tensor.shape[2:]))
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _fill(tensor: Tensor, values: np.ndarray) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"tensor: expected a Tensor (a Parameter), got {type(tensor).__name__}")
    write_values(tensor, values)
    return tensor


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """``for i: tensor[i] = U(a, b)``; returns ``tensor``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> nbcoll.manual_seed(0)
    >>> w = init.uniform_(nbcoll.tensor(np.zeros(1000)), -1.0, 1.0)
    >>> bool(w.numpy().min() >= -1.0 and w.numpy().max() < 1.0)
    True
    """
    if not a <= b:
        raise ValueError(f"a, b: expected a <= b, got a={a}, b={b}")
    return _fill(tensor, host_generator().uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """``for i: tensor[i] = N(mean, std**2)``; returns ``tensor``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> nbcoll.manual_seed(0)
    >>> w = init.normal_(nbcoll.tensor(np.zeros(10_000)), mean=5.0, std=2.0)
    >>> round(float(w.numpy().mean())), round(float(w.numpy().std()))
    (5, 2)
    """
    if std < 0:
        raise ValueError(f"std: must be >= 0, got {std}")
    return _fill(tensor, host_generator().normal(mean, std, tensor.shape))


def constant_(tensor: Tensor, value: float) -> Tensor:
    """``for i: tensor[i] = value``; returns ``tensor``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> init.constant_(nbcoll.tensor(np.zeros(3)), 0.5).numpy()
    array([0.5, 0.5, 0.5])
    """
    return _fill(tensor, np.full(tensor.shape, value))


def zeros_(tensor: Tensor) -> Tensor:
    """``for i: tensor[i] = 0``; returns ``tensor``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> init.zeros_(nbcoll.tensor(np.ones(3))).numpy()
    array([0., 0., 0.])
    """
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """``for i: tensor[i] = 1``; returns ``tensor``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> init.ones_(nbcoll.tensor(np.zeros(3))).numpy()
    array([1., 1., 1.])
    """
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """U(-bound, bound) with ``bound = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot and Bengio, 2010).

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> nbcoll.manual_seed(0)
    >>> w = init.xavier_uniform_(nbcoll.tensor(np.zeros((200, 100))))
    >>> bound = np.sqrt(6 / (100 + 200))
    >>> bool(np.abs(w.numpy()).max() <= bound)
    True
    """
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> nbcoll.manual_seed(0)
    >>> w = init.xavier_normal_(nbcoll.tensor(np.zeros((200, 100))))
    >>> round(float(w.numpy().std() / np.sqrt(2 / 300)), 1)
    1.0
    """
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode: expected 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    if fan == 0:
        raise ValueError(f"tensor: cannot initialise a tensor with a zero {mode} (shape {tensor.shape})")
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """U(-bound, bound) with ``bound = sqrt(3) * gain / sqrt(fan)`` (He et al., 2015); ``a`` is leaky_relu's slope.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> nbcoll.manual_seed(0)
    >>> w = init.kaiming_uniform_(nbcoll.tensor(np.zeros((64, 50))), nonlinearity="relu")
    >>> bool(np.abs(w.numpy()).max() <= np.sqrt(3) * np.sqrt(2) / np.sqrt(50))
    True
    """
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """N(0, std**2) with ``std = gain / sqrt(fan)``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.nn import init
    >>> nbcoll.manual_seed(0)
    >>> w = init.kaiming_normal_(nbcoll.tensor(np.zeros((400, 50))), nonlinearity="relu")
    >>> round(float(w.numpy().std() / (np.sqrt(2) / np.sqrt(50))), 1)
    1.0
    """
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


__all__ = [
    "calculate_gain",
    "constant_",
    "fan_in_and_fan_out",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]
