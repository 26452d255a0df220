"""Losses: MSELoss, CrossEntropyLoss, NLLLoss and BCEWithLogitsLoss, with PyTorch's conventions.

Every loss takes ``reduction``: ``"mean"`` (the default), ``"sum"``, or ``"none"`` (one loss per element).
Class targets are checked on the host before anything runs: a target outside ``[0, classes)`` (other than
``ignore_index``) is an error that names the loss, the value and its position.

::

    nll:           loss[i] = -w[t_i] * logp[i, t_i]                  (0 where t_i == ignore_index)
    cross entropy: logp = log_softmax(x, class axis), then
                   loss[i] = (1 - eps) * nll[i] - eps / C * sum_c w[c] * logp[i, c]    (label smoothing eps)
    mean:          sum_i loss[i] / sum_i w[t_i]                       (over the targets not ignored)
                   NaN when nothing counts, with zero gradients, as in PyTorch

Example::

    from nbcoll import nn
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)(logits, targets)      # logits (N, C), targets (N,)
    loss.backward()
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.nn.module import Module
from nbcoll.nn.shapes import describe
from nbcoll.tensors import Tensor, tensor

REDUCTIONS = ("mean", "sum", "none")


def _reduction(value: str) -> str:
    if value not in REDUCTIONS:
        raise ValueError(f"reduction: expected one of {REDUCTIONS}, got {value!r}")
    return value


def _as_tensor(x: Any, dtype: Any = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return tensor(np.asarray(x), dtype=dtype)


def _reduce(loss: Tensor, reduction: str, divisor: Any = None) -> Tensor:
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / (loss.size if divisor is None else divisor)


class MSELoss(Module):
    """``for i: loss[i] = (input[i] - target[i]) ** 2``, then reduced; input and target have one shape.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> nn.MSELoss()(nbcoll.tensor([1.0, 2.0]), nbcoll.tensor([1.0, 4.0])).item()
        2.0
    """

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = _reduction(reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 - PyTorch's argument name
        target = _as_tensor(target, input.dtype)
        if target.shape != input.shape:
            raise ValueError(f"{describe(self)}: expected target of input's shape {input.shape}, got {target.shape}")
        diff = input - target
        return _reduce(diff * diff, self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class NLLLoss(Module):
    """Negative log-likelihood of class targets, given log-probabilities (the output of ``log_softmax``).

    ``input`` is ``(N, C)``, ``(C,)`` or ``(N, C, d1, ...)`` with the classes on axis 1; ``target`` holds class
    indices of shape ``(N,)``, ``()`` or ``(N, d1, ...)``. ``weight`` (C,) rescales each class; positions whose
    target is ``ignore_index`` count for nothing, not even in the mean's divisor.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> logp = nbcoll.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]).log_softmax(axis=1)
        >>> round(nn.NLLLoss()(logp, nbcoll.tensor([2, 0])).item(), 4)
        1.7531
    """

    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__()
        self.class_weight = None if weight is None else np.asarray(_as_tensor(weight).numpy(), np.float64)
        if self.class_weight is not None and self.class_weight.ndim != 1:
            raise ValueError(f"weight: expected one weight per class (1-D), got shape {self.class_weight.shape}")
        self.ignore_index = int(ignore_index)
        self.reduction = _reduction(reduction)

    def _rows(self, input: Tensor, target: Any) -> tuple[Tensor, np.ndarray, int]:  # noqa: A002
        """``input`` as ``(positions, C)`` rows (classes last) and the targets as a host array, both checked."""
        if not isinstance(input, Tensor) or input.dtype.kind != "f":
            raise TypeError(f"{describe(self)}: expected a floating-point Tensor as input, got {input!r}")
        if input.ndim == 0:
            raise ValueError(f"{describe(self)}: expected input of shape (N, C), (C,) or (N, C, d1, ...), got ()")
        target = _as_tensor(target)
        class_axis = 0 if input.ndim == 1 else 1
        classes = input.shape[class_axis]
        expected = input.shape[:class_axis] + input.shape[class_axis + 1 :]
        if target.dtype.kind not in "iu" or target.shape != expected:
            raise ValueError(
                f"{describe(self)}: expected integer class targets of shape {expected} for input of shape "
                f"{input.shape}, got dtype {target.dtype} and shape {target.shape}"
            )
        if self.class_weight is not None and self.class_weight.shape != (classes,):
            raise ValueError(f"{describe(self)}: weight has {self.class_weight.size} entries for {classes} classes")
        host = target.numpy().astype(np.int64)
        bad = ((host < 0) | (host >= classes)) & (host != self.ignore_index)
        if bad.any():
            at = tuple(int(p) for p in np.argwhere(bad)[0])
            raise ValueError(
                f"{describe(self)}: target {host[at]} at position {at} is out of range [0, {classes}) "
                f"(ignore_index is {self.ignore_index}; {int(bad.sum())} bad target(s))"
            )
        if input.ndim > 2:  # (N, C, d1, ...) -> (N, d1, ..., C): one row of classes per position
            axes = (0, *range(2, input.ndim), 1)
            input = input.transpose(axes)
        return input.reshape(-1, classes), host.reshape(-1), classes

    def _weights(self, targets: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """Per position: the weight of its class, 0 where ignored; and the safe index (0 where ignored)."""
        keep = targets != self.ignore_index
        safe = np.where(keep, targets, 0)
        class_weight = 1.0 if self.class_weight is None else self.class_weight[safe]
        return (keep * class_weight).astype(dtype), safe

    def _nll(self, logp: Tensor, weights: np.ndarray, safe: np.ndarray) -> Tensor:
        picked = logp.gather(safe.reshape(-1, 1), axis=1).reshape(-1)
        return -(picked * tensor(weights, dtype=logp.dtype))

    def _finish(self, per_position: Tensor, weights: np.ndarray, target_shape: tuple[int, ...]) -> Tensor:
        if self.reduction == "none":
            return per_position.reshape(target_shape)
        divisor = float(weights.sum())
        if self.reduction == "mean" and divisor == 0:
            # Nothing counts (every target ignored, or weighted 0): the mean of no losses is NaN, as in PyTorch,
            # but its gradient must stay zero, as PyTorch's does; dividing by 0 would send 0 * inf = NaN upstream.
            return per_position.sum() * 0.0 + float("nan")
        return _reduce(per_position, self.reduction, divisor)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        logp, targets, _ = self._rows(input, target)
        weights, safe = self._weights(targets, logp.dtype)
        target_shape = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
        return self._finish(self._nll(logp, weights, safe), weights, target_shape)

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}"


class CrossEntropyLoss(NLLLoss):
    """``NLLLoss`` of ``log_softmax(input)`` over the class axis, with optional label smoothing.

    With ``label_smoothing = eps`` the target distribution puts ``1 - eps + eps / C`` on the target class and
    ``eps / C`` on every other one. The log-softmax is one stable kernel (the maximum is subtracted first), so
    large logits do not overflow. ``target`` may also be class probabilities of the input's shape (floats).

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> logits = nbcoll.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
        >>> round(nn.CrossEntropyLoss()(logits, nbcoll.tensor([0, 1])).item(), 4)
        0.6691
        >>> loss_fn = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
        >>> round(loss_fn(logits, nbcoll.tensor([0, 1])).item(), 4)        # only the second row counts
        1.0986
    """

    def __init__(
        self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0
    ) -> None:
        super().__init__(weight, ignore_index, reduction)
        if not 0 <= label_smoothing <= 1:
            raise ValueError(f"label_smoothing: expected a number in [0, 1], got {label_smoothing!r}")
        self.label_smoothing = float(label_smoothing)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        if not isinstance(input, Tensor) or input.dtype.kind != "f":
            raise TypeError(f"{describe(self)}: expected floating-point logits, got {input!r}")
        target = _as_tensor(target)
        if target.dtype.kind == "f":
            return self._soft_targets(input, target)
        class_axis = 0 if input.ndim == 1 else 1
        logp, targets, classes = self._rows(input.log_softmax(axis=class_axis) if input.ndim else input, target)
        weights, safe = self._weights(targets, logp.dtype)
        loss = self._nll(logp, weights, safe)
        eps = self.label_smoothing
        if eps > 0:
            class_weight = np.ones(classes) if self.class_weight is None else self.class_weight
            spread = -(logp * tensor(class_weight.astype(logp.dtype))).sum(axis=1)  # -sum_c w[c] * logp[i, c]
            keep = tensor((targets != self.ignore_index).astype(logp.dtype))
            loss = loss * (1 - eps) + spread * keep * (eps / classes)
        target_shape = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
        return self._finish(loss, weights, target_shape)

    def _soft_targets(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        """``loss[i] = -sum_c w[c] * p[i, c] * logp[i, c]``; the mean divides by the number of positions."""
        if target.shape != input.shape or input.ndim == 0:
            raise ValueError(
                f"{describe(self)}: expected class probabilities of the input's shape {input.shape}, got {target.shape}"
            )
        class_axis = 0 if input.ndim == 1 else 1
        classes = input.shape[class_axis]
        probs = target.astype(input.dtype) if target.dtype != input.dtype else target
        if self.label_smoothing > 0:
            probs = probs * (1 - self.label_smoothing) + self.label_smoothing / classes
        terms = input.log_softmax(axis=class_axis) * probs
        if self.class_weight is not None:
            shape = [1] * input.ndim
            shape[class_axis] = classes
            terms = terms * tensor(self.class_weight.reshape(shape).astype(input.dtype))
        loss = -terms.sum(axis=class_axis)
        return _reduce(loss, self.reduction)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, label_smoothing={self.label_smoothing}"


class BCEWithLogitsLoss(Module):
    """Binary cross entropy of ``sigmoid(input)`` against targets in [0, 1], computed without overflow.

    ``loss = -(pos_weight * y * log sigmoid(x) + (1 - y) * log(1 - sigmoid(x)))``. Both logarithms come from one
    log-softmax over the pair ``(0, x)``: ``log_softmax(0, x) = (log(1 - sigmoid(x)), log sigmoid(x))``, which
    subtracts the larger of the two before exponentiating, so ``x = +-1000`` gives finite losses and gradients.
    ``weight`` multiplies each element's loss (broadcast), ``pos_weight`` (one per class, the last axis) the
    positive term.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> round(nn.BCEWithLogitsLoss()(nbcoll.tensor([0.0, 1000.0]), nbcoll.tensor([1.0, 1.0])).item(), 4)
        0.3466
    """

    def __init__(self, weight: Any = None, reduction: str = "mean", pos_weight: Any = None) -> None:
        super().__init__()
        self.weight = None if weight is None else _as_tensor(weight).numpy()
        self.pos_weight = None if pos_weight is None else _as_tensor(pos_weight).numpy()
        self.reduction = _reduction(reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        if not isinstance(input, Tensor) or input.dtype.kind != "f":
            raise TypeError(f"{describe(self)}: expected floating-point logits, got {input!r}")
        target = _as_tensor(target, input.dtype)
        if target.shape != input.shape:
            raise ValueError(f"{describe(self)}: expected target of input's shape {input.shape}, got {target.shape}")
        host = target.numpy()
        if host.size and not ((host >= 0) & (host <= 1)).all():
            at = tuple(int(p) for p in np.argwhere(~((host >= 0) & (host <= 1)))[0])
            raise ValueError(f"{describe(self)}: target {host[at]} at position {at} is out of range [0, 1]")
        target = target.astype(input.dtype) if target.dtype != input.dtype else target
        pair = input.reshape(*input.shape, 1) * tensor(np.array([0.0, 1.0], input.dtype))  # (..., 2) = (0, x)
        log_probs = pair.log_softmax(axis=-1)
        log_not, log_yes = log_probs[..., 0], log_probs[..., 1]
        positive = target * log_yes
        if self.pos_weight is not None:
            positive = positive * tensor(self.pos_weight.astype(input.dtype))
        loss = -(positive + (1 - target) * log_not)
        if self.weight is not None:
            loss = loss * tensor(self.weight.astype(input.dtype))
        return _reduce(loss, self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "MSELoss", "NLLLoss"]
