"""Recurrent layers: RNN, LSTM and GRU unroll the one-step cells of :mod:`nbcoll.nn.recurrent_cells` in time.

The sequence layers run layer by layer: the input part of every time step is one matrix product over the whole
sequence (it does not depend on h), and only the hidden part walks the steps one by one::

    for l in layers:  gi = inputs @ W_ih[l]^T + b_ih[l]          (T, B, G * H) at once
                      for t in range(T):  h[l] = step(gi[t], h[l]);  outputs[t] = h[l]
                      inputs = outputs

Their parameters are named as PyTorch's (``weight_ih_l0``, ``bias_hh_l1``...), in PyTorch's layout (see
:mod:`nbcoll.nn.recurrent_cells`), so state dicts carry over; ``dropout`` applies between layers in training, as
PyTorch's does. Bidirectional layers are not provided. Every parameter starts uniform in
``[-1/sqrt(hidden_size), 1/sqrt(hidden_size)]``, as in PyTorch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import nbcoll.functional as F
from nbcoll.nn.dropout import Dropout
from nbcoll.nn.module import Module
from nbcoll.nn.recurrent_cells import (
    GATES,
    GRUCell,
    LSTMCell,
    RNNCell,
    affine,
    gru_step,
    lstm_step,
    rnn_step,
    uniform_parameter,
)
from nbcoll.nn.shapes import check_input, describe, positive_int
from nbcoll.tensors import Tensor

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNCell"]


class _Recurrent(Module):
    """What RNN, LSTM and GRU share: per-layer parameters named as PyTorch's, the shape checks, the time loop."""

    mode = ""
    """A key of :data:`GATES`: how many gates' rows each weight stacks."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.input_size = positive_int(input_size, "input_size")
        self.hidden_size = positive_int(hidden_size, "hidden_size")
        self.num_layers = positive_int(num_layers, "num_layers")
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        # Between layers, not after the last one (PyTorch's rule); a Dropout has no parameters to save.
        self.dropout = Dropout(dropout)
        rows, bound = GATES[self.mode] * hidden_size, 1.0 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            width = input_size if layer == 0 else hidden_size
            setattr(self, f"weight_ih_l{layer}", uniform_parameter((rows, width), bound, dtype))
            setattr(self, f"weight_hh_l{layer}", uniform_parameter((rows, hidden_size), bound, dtype))
            if bias:
                setattr(self, f"bias_ih_l{layer}", uniform_parameter((rows,), bound, dtype))
                setattr(self, f"bias_hh_l{layer}", uniform_parameter((rows,), bound, dtype))

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, bias={self.bias}, "
            f"batch_first={self.batch_first}"
        )

    def _layer_parameters(self, layer: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        return tuple(getattr(self, f"{n}_l{layer}") if self.bias or n.startswith("w") else None for n in names)

    def _step(self, gi: Tensor, state: Any, weight_hh_t: Tensor, bias_hh: Tensor | None) -> Any:
        raise NotImplementedError

    def _time_major(self, x: Any) -> tuple[Tensor, bool]:
        """The input as (T, B, input) and whether it was batched; T must be at least 1."""
        batched_shape = ("batch", "seq", self.input_size) if self.batch_first else ("seq", "batch", self.input_size)
        x = check_input(self, x, [batched_shape, ("seq", self.input_size)], dtype=self.weight_ih_l0.dtype)
        if x.shape[0 if x.ndim == 2 or not self.batch_first else 1] == 0:
            raise ValueError(f"{describe(self)}: the sequence is empty (input shape {x.shape})")
        if x.ndim == 2:
            return x.reshape(x.shape[0], 1, self.input_size), False
        return (x.transpose(1, 0, 2) if self.batch_first else x), True

    def _initial_state(self, hx: Any, x: Tensor, batched: bool, name: str) -> list[Tensor]:
        """One (B, H) state per layer: zeros, or the slices of ``hx`` (num_layers, B, H) / (num_layers, H)."""
        batch = x.shape[1]
        if hx is None:
            return [Tensor(np.zeros((batch, self.hidden_size), x.dtype))] * self.num_layers
        want = (self.num_layers, batch, self.hidden_size) if batched else (self.num_layers, self.hidden_size)
        hx = check_input(self, hx, want, name=name, dtype=x.dtype)
        hx = hx.reshape(self.num_layers, batch, self.hidden_size)
        return [h.reshape(batch, self.hidden_size) for h in F.split(hx, self.num_layers, axis=0)]

    def _run(self, x: Tensor, states: list[Any]) -> tuple[Tensor, list[Any]]:
        """Run every layer over the whole sequence; return the last layer's outputs (T, B, H) and final states."""
        steps, batch = x.shape[0], x.shape[1]
        inputs, finals = x, []
        for layer in range(self.num_layers):
            weight_ih, weight_hh, bias_ih, bias_hh = self._layer_parameters(layer)
            input_parts = affine(inputs, weight_ih.T, bias_ih)  # (T, B, G * H): every step at once
            weight_hh_t, state, outputs = weight_hh.T, states[layer], []
            width = input_parts.shape[-1]  # spelled out: an empty batch leaves -1 nothing to infer it from
            for gi in F.split(input_parts, steps, axis=0):
                state = self._step(gi.reshape(batch, width), state, weight_hh_t, bias_hh)
                outputs.append(state[0] if isinstance(state, tuple) else state)
            inputs = F.stack(outputs, axis=0)
            if layer < self.num_layers - 1:
                inputs = self.dropout(inputs)
            finals.append(state)
        return inputs, finals

    def _finish(self, outputs: Tensor, batched: bool) -> Tensor:
        """The last layer's outputs (T, B, H) in the input's layout."""
        if not batched:
            return outputs.reshape(outputs.shape[0], self.hidden_size)
        return outputs.transpose(1, 0, 2) if self.batch_first else outputs

    def _stack_states(self, finals: list[Tensor], batched: bool) -> Tensor:
        """The final state of every layer as (num_layers, B, H), or (num_layers, H) for an unbatched input."""
        h_n = F.stack(finals, axis=0)
        return h_n if batched else h_n.reshape(self.num_layers, self.hidden_size)

    def forward(self, x: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x, batched = self._time_major(x)
        outputs, finals = self._run(x, self._initial_state(hx, x, batched, "hx"))
        return self._finish(outputs, batched), self._stack_states(finals, batched)


class RNN(_Recurrent):
    """An Elman RNN over a sequence, ``num_layers`` deep: ``h_t = tanh(x_t W_ih^T + b_ih + h_t-1 W_hh^T + b_hh)``.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> rnn = nn.RNN(10, 20, num_layers=2)
        >>> x = nbcoll.tensor(np.ones((7, 4, 10), np.float32))      # (seq, batch, 10)
        >>> output, h_n = rnn(x)
        >>> output.shape, h_n.shape
        ((7, 4, 20), (2, 4, 20))
        >>> output, h_n = rnn(x, h_n)                              # continue from a state

    With ``batch_first=True`` the input and output are (batch, seq, features); h_n stays (layers, batch, hidden).
    An unbatched input (seq, features) gives (seq, hidden) and (layers, hidden).
    """

    mode = "RNN_TANH"  # RNN_RELU has as many rows: one gate

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        dtype: Any = None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity: expected 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, dtype)
        self.nonlinearity = nonlinearity

    def extra_repr(self) -> str:
        return super().extra_repr() + f", nonlinearity={self.nonlinearity}"

    def _step(self, gi: Tensor, h: Tensor, weight_hh_t: Tensor, bias_hh: Tensor | None) -> Tensor:
        return rnn_step(gi, h, weight_hh_t, bias_hh, self.nonlinearity)


class GRU(_Recurrent):
    """A GRU unrolled over a sequence, ``num_layers`` deep (gates reset, update, new, as in PyTorch).

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> gru = nn.GRU(10, 20, batch_first=True)
        >>> output, h_n = gru(nbcoll.tensor(np.ones((4, 7, 10), np.float32)))     # (batch, seq, 10)
        >>> output.shape, h_n.shape
        ((4, 7, 20), (1, 4, 20))
    """

    mode = "GRU"

    def _step(self, gi: Tensor, h: Tensor, weight_hh_t: Tensor, bias_hh: Tensor | None) -> Tensor:
        return gru_step(gi, h, weight_hh_t, bias_hh)


class LSTM(_Recurrent):
    """An LSTM unrolled over a sequence, ``num_layers`` deep (gates input, forget, cell, output, as in PyTorch).

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> lstm = nn.LSTM(10, 20, num_layers=2)
        >>> x = nbcoll.tensor(np.ones((7, 4, 10), np.float32))     # (seq, batch, 10)
        >>> output, (h_n, c_n) = lstm(x)
        >>> output.shape, h_n.shape, c_n.shape
        ((7, 4, 20), (2, 4, 20), (2, 4, 20))
        >>> output, (h_n, c_n) = lstm(x, (h_n, c_n))              # continue from a state
    """

    mode = "LSTM"

    def _step(
        self, gi: Tensor, state: tuple[Tensor, Tensor], weight_hh_t: Tensor, bias_hh: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        return lstm_step(gi, state, weight_hh_t, bias_hh)

    def forward(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        x, batched = self._time_major(x)
        h0, c0 = (None, None) if hx is None else hx
        h_states = self._initial_state(h0, x, batched, "hx[0]")
        c_states = self._initial_state(c0, x, batched, "hx[1]")
        outputs, finals = self._run(x, list(zip(h_states, c_states, strict=True)))
        h_n = self._stack_states([h for h, _ in finals], batched)
        c_n = self._stack_states([c for _, c in finals], batched)
        return self._finish(outputs, batched), (h_n, c_n)


__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNCell", "gru_step", "lstm_step", "rnn_step"]
