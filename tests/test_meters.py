"""Meters against hand-computed values; EditDistanceMeter against Levenshtein distances worked out by hand."""

import math
import time

import numpy as np
import pytest

import nbcoll
from nbcoll.meters import (
    AverageValueMeter,
    CountMeter,
    EditCounts,
    EditDistanceMeter,
    FrameErrorMeter,
    MSEMeter,
    TimeMeter,
    TopKMeter,
    edit_distance,
)


def test_average_value_meter():
    meter = AverageValueMeter()
    assert all(math.isnan(v) for v in meter.value())
    meter.add(4.0)
    assert meter.value()[0] == 4.0 and math.isnan(meter.value()[1])
    for v in (1.0, 2.0, 3.0, 6.0):
        meter.add(v)
    mean, std = meter.value()
    assert mean == pytest.approx(np.mean([4, 1, 2, 3, 6]))
    assert std == pytest.approx(np.std([4, 1, 2, 3, 6], ddof=1))
    weighted = AverageValueMeter()
    weighted.add(2.0, weight=3)  # the same as adding 2.0 three times
    weighted.add(5.0)
    assert weighted.value() == pytest.approx((np.mean([2, 2, 2, 5]), np.std([2, 2, 2, 5], ddof=1)))
    meter.reset()
    assert meter.count == 0


@pytest.mark.parametrize("offset", [0.0, 1e8, 1e9, -1e9])
def test_average_value_meter_std_survives_a_large_offset(offset):
    values = offset + np.array([0.0, 1.0, 2.0, 3.0])
    meter = AverageValueMeter()
    for v in values:
        meter.add(v)
    mean, std = meter.value()
    # What is left is the rounding of values near 1e9 (ulp 1.2e-7), not the square of it (1e18's ulp is 128).
    assert mean == pytest.approx(np.mean(values), rel=1e-15)
    assert std == pytest.approx(np.std(values, ddof=1), rel=1e-6)  # 1.29..., not 1.63 or 0

    weighted = AverageValueMeter()  # the same samples as weighted adds: value 0 once, 1 twice, 3 three times
    for v, n in [(0.0, 1), (1.0, 2), (3.0, 3), (2.0, 0)]:
        weighted.add(offset + v, weight=n)
    samples = offset + np.array([0.0, 1, 1, 3, 3, 3])
    assert weighted.count == 6
    assert weighted.value() == pytest.approx((np.mean(samples), np.std(samples, ddof=1)), rel=1e-6)


def test_average_value_meter_with_zero_and_one_values():
    meter = AverageValueMeter()
    meter.add(5.0, weight=0)  # weighs nothing: still empty
    assert meter.count == 0 and all(math.isnan(v) for v in meter.value())
    meter.add(1e9 + 0.5)
    mean, std = meter.value()
    assert mean == 1e9 + 0.5 and math.isnan(std)
    meter.add(1e9 + 0.5)
    assert meter.value() == (1e9 + 0.5, 0.0)
    with pytest.raises(ValueError, match="weight: must be >= 0"):
        meter.add(1.0, weight=-1)


def test_time_meter_counts_running_time_only():
    timer = TimeMeter(unit=True)
    assert timer.value() == 0.0
    time.sleep(0.02)
    timer.increment(2)
    timer.stop()
    stopped = timer.value()
    time.sleep(0.03)
    assert timer.value() == stopped  # the clock does not run while stopped
    assert stopped >= 0.01 / 2
    timer.resume()
    assert TimeMeter().value() >= 0


def test_count_meter():
    counts = CountMeter(3)
    counts.add(0)
    counts.add(2, 5)
    assert counts.value() == [1, 0, 5]
    with pytest.raises(IndexError, match=r"index: expected a bucket in \[0, 3\)"):
        counts.add(3)


def test_mse_meter_accepts_tensors():
    mse = MSEMeter()
    mse.add(np.array([1.0, 2.0]), np.array([1.0, 4.0]))
    mse.add(nbcoll.tensor([[3.0]]), nbcoll.tensor([[0.0]]))
    assert mse.value() == pytest.approx((0 + 4 + 9) / 3)
    rmse = MSEMeter(root=True)
    rmse.add([3.0], [0.0])
    assert rmse.value() == 3.0
    with pytest.raises(ValueError, match="target: expected output's shape"):
        mse.add(np.zeros(2), np.zeros(3))


def test_top_k_meter():
    scores = np.array([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4], [0.9, 0.05, 0.05]])
    labels = np.array([2, 1, 1])
    top1, top2 = TopKMeter(1), TopKMeter(2)
    top1.add(scores, labels)
    top2.add(nbcoll.tensor(scores), nbcoll.tensor(labels))
    assert top1.value() == 0.0
    assert top2.value() == pytest.approx(100 * 2 / 3)  # row 1: the tie 0.3/0.3 ranks class 0 before class 1
    with pytest.raises(ValueError, match="target: labels must lie in"):
        top1.add(scores, np.array([0, 1, 3]))


def test_frame_error_meter():
    fer = FrameErrorMeter()
    fer.add([1, 2, 3, 4], [1, 2, 0, 4])
    assert fer.value() == 25.0
    acc = FrameErrorMeter(accuracy=True)
    acc.add(np.array([[1, 1], [0, 0]]), np.array([[1, 0], [0, 0]]))
    assert acc.value() == 75.0
    assert math.isnan(FrameErrorMeter().value())


@pytest.mark.parametrize(
    "output, target, counts",
    [
        ("", "", EditCounts(0, 0, 0)),
        ("abc", "", EditCounts(3, 0, 0)),  # everything inserted
        ("", "abc", EditCounts(0, 3, 0)),  # everything deleted
        ("abc", "abc", EditCounts(0, 0, 0)),
        ("abd", "abc", EditCounts(0, 0, 1)),
        ("sitting", "kitten", EditCounts(1, 0, 2)),  # k->s, e->i, +g
        ("lawn", "flaw", EditCounts(1, 1, 0)),  # -f, +n: two edits, where substitutions alone would need four
        ("ac", "abc", EditCounts(0, 1, 0)),
        ("xabc", "abc", EditCounts(1, 0, 0)),
        ("b", "a", EditCounts(0, 0, 1)),  # a substitution wins the tie with a deletion plus an insertion
    ],
)
def test_edit_distance_by_hand(output, target, counts):
    assert edit_distance(output, target) == counts


def test_edit_distance_total_is_levenshtein():
    assert edit_distance("execution", "intention").total == 5
    assert edit_distance(["the", "cat"], ["a", "cat", "sat"]).total == 2


def test_edit_distance_meter_accumulates_over_sequences():
    wer = EditDistanceMeter()
    assert wer.value().error_rate == 0.0
    wer.add("the cat sat".split(), "the cat sat down".split())  # one deletion
    wer.add(np.array([1, 2, 3]), np.array([1, 5, 3]))  # one substitution
    wer.add([7], [])  # one insertion, no target token
    value = wer.value()
    assert (value.insertions, value.deletions, value.substitutions, value.target_length) == (1, 1, 1, 7)
    assert value.error_rate == pytest.approx(300 / 7)
    only_insertions = EditDistanceMeter()
    only_insertions.add("ab", "")
    assert only_insertions.value().error_rate == math.inf
