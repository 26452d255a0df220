"""Saving, loading and casting a module's tensors: ``state_dict``, ``load_state_dict`` and ``to(dtype)``.

:class:`ModuleState` is the half of :class:`~nbcoll.nn.module.Module` that moves values in and out: a state dict
maps each dotted name to a host copy (a NumPy array) of a parameter or a persistent buffer, and loading copies
values into the existing tensors, so that an optimizer built before keeps working.

Example::

    >>> from nbcoll import nn
    >>> a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    >>> b.load_state_dict(a.state_dict())
    IncompatibleKeys(missing_keys=[], unexpected_keys=[])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from nbcoll import memory
from nbcoll.nn.parameter import write_values
from nbcoll.tensors import Tensor, no_grad

if TYPE_CHECKING:
    from nbcoll.nn.module import Module


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(strict=False)`` skipped: keys the module has and the dict lacks, and the reverse.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> layer = nn.Linear(2, 2)
    >>> layer.load_state_dict({"weight": layer.weight.numpy(), "scale": 1.0}, strict=False)
    IncompatibleKeys(missing_keys=['bias'], unexpected_keys=['scale'])
    """

    missing_keys: list[str]
    unexpected_keys: list[str]


class ModuleState:
    """State dicts and dtype casts of :class:`~nbcoll.nn.module.Module`, the only class that uses it.

    >>> from nbcoll import nn
    >>> sorted(nn.Linear(2, 2).half().state_dict())
    ['bias', 'weight']
    """

    _modules: dict[str, Any]
    _parameters: dict[str, Any]
    _buffers: dict[str, Any]
    _non_persistent_buffers: set[str]

    # -- state -------------------------------------------------------------------------------------------------

    def _state_tensors(self, prefix: str = "") -> dict[str, Tensor]:
        """Parameters and persistent buffers by dotted name; a shared one appears under each of its names."""
        state: dict[str, Tensor] = {}
        for name, param in self._parameters.items():
            if param is not None:
                state[prefix + name] = param
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers:
                state[prefix + name] = buffer
        for name, child in self._modules.items():
            if child is not None:
                state.update(child._state_tensors(f"{prefix}{name}."))
        return state

    def state_dict(self, keep_vars: bool = False) -> dict[str, Any]:
        """Name -> host copy (``numpy.ndarray``) of every parameter and persistent buffer; with ``keep_vars=True``,
        name -> the Tensor itself.

        >>> from nbcoll import nn
        >>> state = nn.Linear(3, 2).state_dict()
        >>> {name: value.shape for name, value in state.items()}
        {'weight': (2, 3), 'bias': (2,)}
        """
        tensors = self._state_tensors()
        if keep_vars:
            return tensors
        return {name: tensor.numpy() for name, tensor in tensors.items()}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy ``state_dict``'s values into the existing parameters and buffers (converted to their dtypes).

        Nothing is copied unless every value fits: a wrong shape is always an error, and with ``strict=True`` so
        is a missing or an unexpected key; the error names each of them. Returns the missing and unexpected keys.

        >>> from nbcoll import nn
        >>> a, b = nn.Linear(3, 2), nn.Linear(3, 2)
        >>> b.load_state_dict(a.state_dict())
        IncompatibleKeys(missing_keys=[], unexpected_keys=[])
        >>> bool((a.weight.numpy() == b.weight.numpy()).all())
        True
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict: expected a dict of name -> array, got {type(state_dict).__name__}")
        targets = self._state_tensors()
        missing = [name for name in targets if name not in state_dict]
        unexpected = [name for name in state_dict if name not in targets]
        values, wrong_shapes = {}, []
        for name, target in targets.items():
            if name in state_dict:
                value = state_dict[name]
                values[name] = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
                if values[name].shape != target.shape:
                    wrong_shapes.append(f"{name!r} (expected {target.shape}, got {values[name].shape})")
        problems = []
        if strict and missing:
            problems.append("missing keys " + ", ".join(repr(k) for k in missing))
        if strict and unexpected:
            problems.append("unexpected keys " + ", ".join(repr(k) for k in unexpected))
        if wrong_shapes:
            problems.append("wrong shapes " + ", ".join(wrong_shapes))
        if problems:
            raise RuntimeError(f"load_state_dict: cannot load into {type(self).__name__}: " + "; ".join(problems))
        for name, value in values.items():
            write_values(targets[name], value)
        return IncompatibleKeys(missing, unexpected)

    def to(self, dtype: Any) -> Module:
        """Cast every floating parameter, gradient and buffer to ``dtype`` in place; returns self.

        The Parameter objects stay the same (an optimizer built before keeps working); their arrays are replaced.

        >>> import numpy as np
        >>> from nbcoll import nn
        >>> layer = nn.Linear(2, 2)
        >>> weight = layer.weight
        >>> layer.to(np.float64).weight.dtype, layer.weight is weight
        (dtype('float64'), True)
        """
        dtype = memory.check_dtype(dtype, "dtype")
        if dtype.kind != "f":
            raise TypeError(f"dtype: Module.to casts to a floating dtype (float16/32/64), got {dtype}")
        with no_grad():
            for tensor in [*self.parameters(), *self.buffers()]:
                if tensor.dtype.kind == "f" and tensor.dtype != dtype:
                    # The setter of .data refuses a new dtype, on purpose; a cast in place is the one exception.
                    tensor._data = tensor.detach().astype(dtype).data
                    if tensor.grad is not None:
                        tensor.grad = tensor.grad.detach().astype(dtype)
        return self

    def float(self) -> Module:
        """Cast every floating parameter, gradient and buffer to float32 in place; returns self.

        >>> from nbcoll import nn
        >>> nn.Linear(2, 2).double().float().weight.dtype
        dtype('float32')
        """
        return self.to(np.float32)

    def double(self) -> Module:
        """Cast every floating parameter, gradient and buffer to float64 in place; returns self.

        >>> from nbcoll import nn
        >>> nn.Linear(2, 2).double().weight.dtype
        dtype('float64')
        """
        return self.to(np.float64)

    def half(self) -> Module:
        """Cast every floating parameter, gradient and buffer to float16 in place; returns self.

        >>> from nbcoll import nn
        >>> nn.Linear(2, 2).half().bias.dtype
        dtype('float16')
        """
        return self.to(np.float16)
