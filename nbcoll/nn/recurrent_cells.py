"""Recurrent cells: one time step of an RNN, an LSTM or a GRU (RNNCell, LSTMCell, GRUCell), and the step
functions that :mod:`nbcoll.nn.recurrent`'s sequence layers unroll in time.

Parameters follow PyTorch's layout: for G gates of ``hidden_size`` rows each, ``weight_ih`` is
(G * hidden, input), ``weight_hh`` (G * hidden, hidden), ``bias_ih`` and ``bias_hh`` (G * hidden,), the gates
stacked in PyTorch's order. With ``gi = x W_ih^T + b_ih`` (the input's part) and ``gh = h W_hh^T + b_hh``::

    RNN  (G = 1):  h' = tanh(gi + gh)                    (or relu)
    LSTM (G = 4):  i, f, g, o = split(gi + gh, 4)
                   c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')
    GRU  (G = 3):  r = sigmoid(gi_r + gh_r);  z = sigmoid(gi_z + gh_z);  n = tanh(gi_n + r * gh_n)
                   h' = (1 - z) * n + z * h

Every parameter starts uniform in ``[-1/sqrt(hidden_size), 1/sqrt(hidden_size)]``, as in PyTorch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import nbcoll.functional as F
from nbcoll.nn import init
from nbcoll.nn.linear import parameter_dtype
from nbcoll.nn.module import Module
from nbcoll.nn.parameter import Parameter
from nbcoll.nn.shapes import check_input, positive_int
from nbcoll.tensors import Tensor

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}
"""Gates per cell kind: the weights stack G blocks of ``hidden_size`` rows."""


# ---------------------------------------------------------------------------------------------------------------
# One time step of each kind, from the input's part gi (already x W_ih^T + b_ih) and the hidden state.


def affine(x: Tensor, weight_t: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight^T + bias`` given ``weight^T`` (transposed once per call of the layer, not once per step)."""
    y = x @ weight_t
    return y if bias is None else y + bias


def rnn_step(gi: Tensor, h: Tensor, weight_hh_t: Tensor, bias_hh: Tensor | None, nonlinearity: str) -> Tensor:
    """``h' = tanh(gi + h W_hh^T + b_hh)`` (or relu)."""
    pre = gi + affine(h, weight_hh_t, bias_hh)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


def lstm_step(
    gi: Tensor, state: tuple[Tensor, Tensor], weight_hh_t: Tensor, bias_hh: Tensor | None
) -> tuple[Tensor, Tensor]:
    """``i, f, g, o = split(gi + h W_hh^T + b_hh, 4)``; ``c' = σ(f) c + σ(i) tanh(g)``; ``h' = σ(o) tanh(c')``."""
    h, c = state
    i, f, g, o = F.split(gi + affine(h, weight_hh_t, bias_hh), 4, axis=-1)
    c_next = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c_next.tanh(), c_next


def gru_step(gi: Tensor, h: Tensor, weight_hh_t: Tensor, bias_hh: Tensor | None) -> Tensor:
    """``r, z`` from ``gi + gh``; ``n = tanh(gi_n + r * gh_n)``; ``h' = (1 - z) n + z h``."""
    gi_r, gi_z, gi_n = F.split(gi, 3, axis=-1)
    gh_r, gh_z, gh_n = F.split(affine(h, weight_hh_t, bias_hh), 3, axis=-1)
    r, z = (gi_r + gh_r).sigmoid(), (gi_z + gh_z).sigmoid()
    n = (gi_n + r * gh_n).tanh()
    return (1.0 - z) * n + z * h


def uniform_parameter(shape: tuple[int, ...], bound: float, dtype: Any) -> Parameter:
    return init.uniform_(Parameter(np.zeros(shape, parameter_dtype(dtype))), -bound, bound)


# ---------------------------------------------------------------------------------------------------------------
# Cells.


class _Cell(Module):
    """What the three cells share: the four parameters, their initialisation and the input check."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, mode: str, dtype: Any) -> None:
        super().__init__()
        self.input_size = positive_int(input_size, "input_size")
        self.hidden_size = positive_int(hidden_size, "hidden_size")
        self.bias = bool(bias)
        rows, bound = GATES[mode] * hidden_size, 1.0 / math.sqrt(hidden_size)
        self.weight_ih = uniform_parameter((rows, input_size), bound, dtype)
        self.weight_hh = uniform_parameter((rows, hidden_size), bound, dtype)
        if bias:
            self.bias_ih = uniform_parameter((rows,), bound, dtype)
            self.bias_hh = uniform_parameter((rows,), bound, dtype)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias}"

    def _input(self, x: Any) -> tuple[Tensor, bool]:
        """The input as (batch, input_size), and whether it came batched (an unbatched one is (input_size,))."""
        x = check_input(self, x, [("batch", self.input_size), (self.input_size,)], dtype=self.weight_ih.dtype)
        return (x, True) if x.ndim == 2 else (x.reshape(1, self.input_size), False)

    def _state(self, hx: Any, x: Tensor, batched: bool, name: str) -> Tensor:
        """A state as (batch, hidden_size): zeros when None, else checked against the input's batch."""
        if hx is None:
            return Tensor(np.zeros((x.shape[0], self.hidden_size), x.dtype))
        want = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        return check_input(self, hx, want, name=name, dtype=x.dtype).reshape(x.shape[0], self.hidden_size)

    def _input_part(self, x: Tensor) -> Tensor:
        return affine(x, self.weight_ih.T, self.bias_ih)

    def _unbatch(self, h: Tensor, batched: bool) -> Tensor:
        return h if batched else h.reshape(self.hidden_size)


class RNNCell(_Cell):
    """An Elman cell: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``, or relu with ``nonlinearity="relu"``.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> cell = nn.RNNCell(10, 20)
        >>> h = None
        >>> for x_t in nbcoll.tensor(np.ones((3, 4, 10), np.float32)):   # 3 steps of (batch 4, 10)
        ...     h = cell(x_t, h)                                        # h=None starts from zeros
        >>> h.shape
        (4, 20)
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh", dtype: Any = None
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity: expected 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias, "RNN_" + nonlinearity.upper(), dtype)
        self.nonlinearity = nonlinearity

    def extra_repr(self) -> str:
        return super().extra_repr() + f", nonlinearity={self.nonlinearity}"

    def forward(self, x: Tensor, hx: Tensor | None = None) -> Tensor:
        x, batched = self._input(x)
        h = rnn_step(
            self._input_part(x), self._state(hx, x, batched, "hx"), self.weight_hh.T, self.bias_hh, self.nonlinearity
        )
        return self._unbatch(h, batched)


class LSTMCell(_Cell):
    """A long short-term memory cell; gates in PyTorch's order input, forget, cell, output.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> cell = nn.LSTMCell(10, 20)
        >>> x_t = nbcoll.tensor(np.ones((4, 10), np.float32))
        >>> h, c = cell(x_t)                    # the state starts from zeros
        >>> h, c = cell(x_t, (h, c))
        >>> h.shape, c.shape
        ((4, 20), (4, 20))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, "LSTM", dtype)

    def forward(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        x, batched = self._input(x)
        h, c = (None, None) if hx is None else hx
        state = (self._state(h, x, batched, "hx[0]"), self._state(c, x, batched, "hx[1]"))
        h, c = lstm_step(self._input_part(x), state, self.weight_hh.T, self.bias_hh)
        return self._unbatch(h, batched), self._unbatch(c, batched)


class GRUCell(_Cell):
    """A gated recurrent unit; gates in PyTorch's order reset, update, new.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> cell = nn.GRUCell(10, 20)
        >>> x_t = nbcoll.tensor(np.ones((4, 10), np.float32))
        >>> h = cell(x_t)
        >>> cell(x_t, h).shape
        (4, 20)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, "GRU", dtype)

    def forward(self, x: Tensor, hx: Tensor | None = None) -> Tensor:
        x, batched = self._input(x)
        h = gru_step(self._input_part(x), self._state(hx, x, batched, "hx"), self.weight_hh.T, self.bias_hh)
        return self._unbatch(h, batched)


# ---------------------------------------------------------------------------------------------------------------
# Sequence layers.
