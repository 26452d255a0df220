"""Meters: small accumulators that track training as it runs (losses, time, accuracy, sequence error).

Every meter has ``add(...)`` to feed it, ``value()`` to read it and ``reset()`` to start over. Inputs may be
NumPy arrays, Python sequences or ``nbcoll.Tensor`` objects (read back to the host once per ``add``). Meters
compute on the host: they summarise a batch at a time and are not on the training step's critical path.

Example::

    loss_meter, accuracy = AverageValueMeter(), TopKMeter(k=1)
    for x, y in loader:
        logits = model(x)
        loss_meter.add(loss.item())
        accuracy.add(logits, y)
    mean_loss, std_loss = loss_meter.value()
    print(f"loss {mean_loss:.3f}, accuracy {accuracy.value():.1f}%")
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def _host(x: Any, arg: str) -> np.ndarray:
    try:
        return np.asarray(x)
    except Exception as exc:  # a device array of another backend, an object NumPy cannot read
        raise TypeError(f"{arg}: expected an array, a sequence or a Tensor, got {type(x).__name__}") from exc


class AverageValueMeter:
    """The weighted mean and the sample standard deviation of the values added.

    Example::

        meter = AverageValueMeter()
        for value in (1.0, 2.0, 3.0):
            meter.add(value)
        meter.value()                   # (2.0, 1.0)

    ``add(value, weight=n)`` counts ``value`` as ``n`` samples (a batch mean over ``n`` examples). The standard
    deviation divides by ``count - 1`` (NumPy's ``ddof=1``); it is NaN until the count exceeds 1, and the mean is
    NaN while empty.

    The mean and the sum of squared deviations from it are updated as each value arrives (Welford's method,
    weighted), rather than kept as a sum and a sum of squares: ``sum(x^2) - count * mean^2`` subtracts two
    nearly equal numbers, and for values far from zero (1e9 + [0, 1, 2, 3]) it leaves rounding error only.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = 0.0
        self._mean = 0.0
        self._squared_deviations = 0.0  # sum over the samples of weight * (value - mean)^2

    def add(self, value: float, weight: float = 1.0) -> None:
        if not weight >= 0:
            raise ValueError(f"weight: must be >= 0, got {weight}")
        if weight == 0:
            return
        value = float(value)
        self.count += weight
        delta = value - self._mean
        self._mean += delta * (weight / self.count)
        # delta * (value - new mean) = delta^2 * (old count / new count): the weighted Welford update.
        self._squared_deviations += weight * delta * (value - self._mean)

    def value(self) -> tuple[float, float]:
        """``(mean, std)``."""
        if self.count == 0:
            return math.nan, math.nan
        if self.count <= 1:
            return self._mean, math.nan
        return self._mean, math.sqrt(max(self._squared_deviations, 0.0) / (self.count - 1))


class TimeMeter:
    """Wall-clock time since the start, excluding stopped periods; per unit of work with ``unit=True``.

    Example::

        timer = TimeMeter(unit=True)
        for batch in loader:
            train_step(batch)
            timer.increment()
        timer.value()                   # seconds per batch

    ``stop()`` pauses the clock (while evaluating, say) and ``resume()`` restarts it.
    """

    def __init__(self, unit: bool = False) -> None:
        self.unit = unit
        self.reset()

    def reset(self) -> None:
        self._elapsed = 0.0
        self._started_at: float | None = time.perf_counter()
        self.units = 0

    def stop(self) -> None:
        if self._started_at is not None:
            self._elapsed += time.perf_counter() - self._started_at
            self._started_at = None

    def resume(self) -> None:
        if self._started_at is None:
            self._started_at = time.perf_counter()

    def increment(self, n: int = 1) -> None:
        """Count ``n`` more units of work (batches, samples) for ``unit=True``."""
        self.units += n

    def value(self) -> float:
        """Seconds elapsed; divided by the units counted when ``unit=True`` (0 before any unit)."""
        elapsed = self._elapsed
        if self._started_at is not None:
            elapsed += time.perf_counter() - self._started_at
        if self.unit:
            return elapsed / self.units if self.units else 0.0
        return elapsed


class CountMeter:
    """Counts per bucket, for ``num`` buckets (samples per class, say).

    Example::

        counts = CountMeter(3)
        counts.add(0)
        counts.add(2, 5)
        counts.value()                  # [1, 0, 5]
    """

    def __init__(self, num: int) -> None:
        if not isinstance(num, int) or num < 1:
            raise ValueError(f"num: expected a positive number of buckets, got {num!r}")
        self.num = num
        self.reset()

    def reset(self) -> None:
        self.counts = [0] * self.num

    def add(self, index: int, value: int = 1) -> None:
        if not 0 <= index < self.num:
            raise IndexError(f"index: expected a bucket in [0, {self.num}), got {index}")
        self.counts[index] += value

    def value(self) -> list[int]:
        return list(self.counts)


class MSEMeter:
    """Mean squared error over every element added: ``sum((output - target) ** 2) / count``.

    Example::

        mse = MSEMeter()
        mse.add(np.array([1.0, 2.0]), np.array([1.0, 4.0]))
        mse.value()                     # 2.0
        MSEMeter(root=True)             # the root mean squared error instead
    """

    def __init__(self, root: bool = False) -> None:
        self.root = root
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self._sum_of_squares = 0.0

    def add(self, output: Any, target: Any) -> None:
        output, target = _host(output, "output"), _host(target, "target")
        if output.shape != target.shape:
            raise ValueError(f"target: expected output's shape {output.shape}, got {target.shape}")
        difference = output.astype(np.float64) - target.astype(np.float64)
        self._sum_of_squares += float(np.sum(difference * difference))
        self.count += difference.size

    def value(self) -> float:
        if self.count == 0:
            return math.nan
        mse = self._sum_of_squares / self.count
        return math.sqrt(mse) if self.root else mse


class TopKMeter:
    """Top-k accuracy in percent: how often the target class is among the ``k`` highest scores.

    Example::

        top5 = TopKMeter(k=5)
        top5.add(logits, labels)        # logits (N, C), labels (N,) integers
        top5.value()                    # 87.5

    Equal scores are ranked by class index, lower first (a stable sort).
    """

    def __init__(self, k: int = 1) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k: expected a positive integer, got {k!r}")
        self.k = k
        self.reset()

    def reset(self) -> None:
        self.correct = 0
        self.count = 0

    def add(self, output: Any, target: Any) -> None:
        output, target = _host(output, "output"), _host(target, "target")
        if output.ndim != 2 or target.shape != output.shape[:1]:
            raise ValueError(
                f"output, target: expected scores (N, C) and labels (N,), got {output.shape} and {target.shape}"
            )
        if target.size and (target.min() < 0 or target.max() >= output.shape[1]):
            raise ValueError(f"target: labels must lie in [0, {output.shape[1]}), got {target.min()}..{target.max()}")
        top = np.argsort(-output, axis=1, kind="stable")[:, : self.k]
        self.correct += int(np.sum(top == target[:, None]))
        self.count += target.size

    def value(self) -> float:
        return 100.0 * self.correct / self.count if self.count else math.nan


class FrameErrorMeter:
    """The percentage of positions where the predicted label differs from the target (frame error rate).

    Example::

        fer = FrameErrorMeter()
        fer.add([1, 2, 3, 4], [1, 2, 0, 4])
        fer.value()                     # 25.0
        FrameErrorMeter(accuracy=True)  # the percentage that match instead
    """

    def __init__(self, accuracy: bool = False) -> None:
        self.accuracy = accuracy
        self.reset()

    def reset(self) -> None:
        self.errors = 0
        self.count = 0

    def add(self, output: Any, target: Any) -> None:
        output, target = _host(output, "output"), _host(target, "target")
        if output.shape != target.shape:
            raise ValueError(f"target: expected output's shape {output.shape}, got {target.shape}")
        self.errors += int(np.sum(output != target))
        self.count += output.size

    def value(self) -> float:
        if self.count == 0:
            return math.nan
        error = 100.0 * self.errors / self.count
        return 100.0 - error if self.accuracy else error


@dataclass(frozen=True)
class EditCounts:
    """The edits that turn a target sequence into an output sequence, with the fewest edits in total.

    Example::

        counts = edit_distance("sitting", "kitten")     # EditCounts(insertions=1, deletions=0, substitutions=2)
        counts.total                                     # 3, the Levenshtein distance
    """

    insertions: int  # tokens of the output that the target lacks
    deletions: int  # tokens of the target that the output lacks
    substitutions: int  # aligned tokens that differ

    @property
    def total(self) -> int:
        return self.insertions + self.deletions + self.substitutions


def edit_distance(output: Sequence[Any], target: Sequence[Any]) -> EditCounts:
    """The Levenshtein distance from ``target`` to ``output``, split into insertions, deletions, substitutions.

    Dynamic programming over prefixes: ``cost[i][j]`` edits turn ``target[:i]`` into ``output[:j]``::

        cost[i][0] = i (deletions)     cost[0][j] = j (insertions)
        cost[i][j] = min(cost[i-1][j-1] + (target[i-1] != output[j-1]),    match or substitution
                         cost[i-1][j] + 1,                                 deletion
                         cost[i][j-1] + 1)                                 insertion

    Among alignments of minimal total cost, the first of those three cases wins a tie, so a substitution is
    preferred over a deletion plus an insertion.
    """
    output, target = list(output), list(target)
    # Each cell holds (total, insertions, deletions, substitutions) of the best alignment of the two prefixes.
    previous = [(j, j, 0, 0) for j in range(len(output) + 1)]
    for i in range(1, len(target) + 1):
        current = [(i, 0, i, 0)]
        for j in range(1, len(output) + 1):
            t, ins, dels, subs = previous[j - 1]
            differs = target[i - 1] != output[j - 1]
            best = (t + differs, ins, dels, subs + differs)
            t, ins, dels, subs = previous[j]
            if t + 1 < best[0]:
                best = (t + 1, ins, dels + 1, subs)
            t, ins, dels, subs = current[j - 1]
            if t + 1 < best[0]:
                best = (t + 1, ins + 1, dels, subs)
            current.append(best)
        previous = current
    _, insertions, deletions, substitutions = previous[-1]
    return EditCounts(insertions, deletions, substitutions)


@dataclass(frozen=True)
class EditDistanceValue:
    """What :meth:`EditDistanceMeter.value` returns: the error rate in percent of the target length, and counts.

    Example::

        value = meter.value()
        print(f"WER {value.error_rate:.1f}% ({value.substitutions} substitutions of {value.target_length} words)")
    """

    error_rate: float
    insertions: int
    deletions: int
    substitutions: int
    target_length: int


class EditDistanceMeter:
    """Sequence error (word or character error rate): edits over all sequences, per 100 target tokens.

    Example::

        wer = EditDistanceMeter()
        wer.add("the cat sat".split(), "the cat sat down".split())
        wer.value().error_rate          # 25.0 (one deletion in four target words)
        wer.value().deletions           # 1

    ``error_rate = 100 * (insertions + deletions + substitutions) / total target length``; with no target
    tokens at all it is 0 when there were no edits and infinity otherwise. It can exceed 100 when the outputs
    are longer than the targets.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.insertions = self.deletions = self.substitutions = self.target_length = 0

    def add(self, output: Sequence[Any], target: Sequence[Any]) -> EditCounts:
        """Add one pair of sequences (lists, strings or 1-D arrays); returns that pair's edits."""
        output = _host(output, "output").tolist() if not isinstance(output, str) else output
        target = _host(target, "target").tolist() if not isinstance(target, str) else target
        counts = edit_distance(output, target)
        self.insertions += counts.insertions
        self.deletions += counts.deletions
        self.substitutions += counts.substitutions
        self.target_length += len(target)
        return counts

    def value(self) -> EditDistanceValue:
        edits = self.insertions + self.deletions + self.substitutions
        if self.target_length:
            rate = 100.0 * edits / self.target_length
        else:
            rate = 0.0 if edits == 0 else math.inf
        return EditDistanceValue(rate, self.insertions, self.deletions, self.substitutions, self.target_length)


__all__ = [
    "AverageValueMeter",
    "CountMeter",
    "EditCounts",
    "EditDistanceMeter",
    "EditDistanceValue",
    "FrameErrorMeter",
    "MSEMeter",
    "TimeMeter",
    "TopKMeter",
    "edit_distance",
]
