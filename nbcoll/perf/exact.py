"""Inputs whose collective results are exact in every dtype, whatever order the ranks' values are combined in.

Every rank's input repeats a pattern of :data:`PERIOD` small whole numbers that depends on the rank. Sums of
small whole numbers, products of ones and twos, maxima and minima are exact in every float type, and integer
wrap-around is order-independent; avg divides that exact sum once. So the expected result is one value per
element, checked for equality: nccl-tests' ``#wrong`` is the number of elements that differ.

Because inputs and results repeat with the pattern, only :data:`PERIOD` values per rank are ever reduced on the
host; checking a 64 MiB result costs a comparison, not a second all-reduce.

Example::

    x = rank_input(rank=1, op="sum", dtype=np.dtype("float32"), start=0, count=10)
    want = reduced_values(op="sum", dtype=np.dtype("float32"), nranks=4, start=0, count=10)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.kernels import combine
from nbcoll.kernels import low_precision as lp

PERIOD = 64
"""Length of the repeating pattern of every input."""

OPS = ("sum", "prod", "max", "min", "avg", "premul_sum")
"""The reduction ops the perf tool can check; ``premul_sum`` multiplies every input by :data:`PREMUL_SCALAR`."""

PREMUL_SCALAR = 2
"""A power of two, so the pre-multiplied inputs stay exact."""


def _pattern(rank: int, op: str, dtype: np.dtype) -> np.ndarray:
    """The :data:`PERIOD` small whole numbers rank ``rank`` repeats (as int64)."""
    i = np.arange(PERIOD, dtype=np.int64)
    if op == "prod":
        return 1 + (i + rank) % 2  # ones and twos: the product is a power of two
    if op in ("max", "min"):
        return (i * 5 + rank * 11) % 23
    if dtype.itemsize == 1 and dtype in lp.WORD_DTYPES:
        # fp8 holds every whole number up to 8 (e5m2) or 16 (e4m3fn) only: sums of zeros and ones (and twice
        # those for premul_sum) stay exact, whatever the order of the steps, up to 8 (e5m2) and 16 ranks.
        return (i + rank) % 2
    return (i + 3 * rank) % 4  # sums of 0..3 stay exact in float16 up to hundreds of ranks


def _repeat(period_values: np.ndarray, start: int, count: int) -> np.ndarray:
    """Elements ``start .. start+count-1`` of the endless repetition of ``period_values``."""
    rolled = np.roll(period_values, -(start % PERIOD))
    return np.resize(rolled, count) if count else period_values[:0]


def make_op(op: str) -> Any:
    """The op to pass to a collective: its name, or the :class:`~nbcoll.kernels.combine.PremulSum`."""
    return combine.premul_sum(PREMUL_SCALAR) if op == "premul_sum" else op


def rank_input(rank: int, op: str, dtype: np.dtype, start: int, count: int) -> np.ndarray:
    """Elements ``start .. start+count-1`` of rank ``rank``'s input for a test of ``op``."""
    return _repeat(_pattern(rank, op, dtype).astype(dtype), start, count)


def _reduced_period(op: str, dtype: np.dtype, nranks: int) -> np.ndarray:
    values = [_pattern(r, op, dtype).astype(dtype) for r in range(nranks)]
    if op == "premul_sum":
        values = [combine.scale_reference(v, PREMUL_SCALAR) for v in values]
    fold = combine.kernel_op(make_op(op))
    acc = values[0]
    for v in values[1:]:
        acc = combine.combine_reference(fold, acc, v)
    if op == "avg" and dtype in lp.WORD_DTYPES:  # bfloat16 and fp8: divided in float32, rounded once
        return (acc.astype(np.float32) / np.float32(nranks)).astype(dtype)
    return combine.divide_reference(acc, nranks) if op == "avg" else acc


def reduced_values(op: str, dtype: np.dtype, nranks: int, start: int, count: int) -> np.ndarray:
    """Elements ``start .. start+count-1`` of ``op`` over all ranks' inputs: the exact expected result."""
    return _repeat(_reduced_period(op, dtype, nranks), start, count)


def count_wrong(got: np.ndarray, expected: np.ndarray) -> int:
    """How many elements differ (NaN never equals anything, so a NaN result counts as wrong)."""
    if got.shape != expected.shape:
        return int(max(got.size, expected.size))
    return int(np.count_nonzero(got != expected))
