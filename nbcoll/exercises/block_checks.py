"""Checks of the kernels whose threads cooperate through shared memory on a tile or a row: tiled matmul, softmax.

Each failing case is also matched against the results the usual mistakes produce (the last partial tile
skipped, no subtraction of the maximum, a thread that covers one column only), so the hint can name the mistake;
otherwise the hint is chosen by the symptom (:mod:`nbcoll.exercises.symptoms`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.exercises import symptoms
from nbcoll.exercises.launching import UNWRITTEN, blocks_for, compare, run_kernel, unwritten_hint
from nbcoll.exercises.report import Report, show, thread_picture_1d, thread_picture_2d, wrong_mask
from nbcoll.kernels.matmul import matmul_reference
from nbcoll.kernels.softmax import softmax_reference

TILE = 4
"""The matmul's tile: blocks of TILE x TILE threads, and TILE x TILE tiles of a and b in shared memory."""

ROW_THREADS = 16
"""Threads per block of the softmax: one block per row."""


MATMUL_HINTS = {
    symptoms.BLOCKS: "whole tiles of out are wrong: row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + "
    "threadIdx.x",
    symptoms.LAST: (
        "only the last rows or columns of out are wrong: a bound check is off by one; write out[row, col] when "
        "row < m and col < n (not m - 1, n - 1), and load 0 only past the edge (k index >= k)"
    ),
    symptoms.SPREAD: (
        "wrong elements spread over a tile, the others right: a thread reads the tile before the others loaded "
        "it; cuda.syncthreads() after the loads and after the multiply-add loop"
    ),
}
"""The tiled matmul's hints by symptom, after the usual mistakes it can compute (the last partial tile skipped)."""


def _matmul_case(m: int, k: int, n: int) -> str:
    grid = (blocks_for(n, TILE), blocks_for(m, TILE))
    return f"({m} x {k}) @ ({k} x {n}) (grid {grid[0]} x {grid[1]} blocks of {TILE} x {TILE})"


def check_tiled_matmul(report: Report, kernel: Any) -> None:
    rng = np.random.default_rng(7)
    shapes = ((1, 1, 1), (5, 3, 6), (4, 8, 4), (6, 9, 7), (0, 3, 2))
    report.plan([_matmul_case(*shape) for shape in shapes])
    for m, k, n in shapes:
        a = rng.integers(-3, 4, (m, k)).astype(np.float32)
        b = rng.integers(-3, 4, (k, n)).astype(np.float32)
        expected = matmul_reference(a, b)
        grid = (blocks_for(n, TILE), blocks_for(m, TILE))
        case = _matmul_case(m, k, n)
        runs = []
        for _ in range(2):  # twice: a race shows as a result that changes from run to run
            out = np.full((m, n), UNWRITTEN, np.float32)
            if not run_kernel(report, case, kernel[grid, (TILE, TILE)], (a, b, out)):
                return
            runs.append(out)

        def diagnose(actual: np.ndarray, a=a, b=b, k=k, runs=runs, expected=expected) -> str:
            if not np.array_equal(runs[0], runs[1], equal_nan=True):
                return (
                    "the result changes from run to run: a thread reads a tile before the others loaded it, or "
                    "loads the next before they finished the last; cuda.syncthreads() after the loads and "
                    "after the multiply-add loop"
                )
            full = (k // TILE) * TILE
            if full < k and np.allclose(actual, a[:, :full] @ b[:full], atol=1e-4):
                return (
                    f"the result is the product over the first {full} of k={k} terms: the last, partial tile "
                    f"is skipped; loop over (k + TILE - 1) // TILE tiles and load 0 past the edge"
                )
            found = symptoms.classify(
                wrong_mask(expected, actual), np.isnan(actual), symptoms.blocks_2d(expected.shape, (TILE, TILE))
            )
            hint = MATMUL_HINTS.get(
                found,
                "elements of a tile past the edge of a or b must be loaded as 0; out[row, col] with row from y, "
                "col from x",
            )
            return unwritten_hint(actual, hint) or hint

        picture = lambda wrong: thread_picture_2d(wrong, (TILE, TILE))  # noqa: E731
        if not compare(report, case, expected, runs[-1], f"a {show(a)}\nb {show(b)}", picture, diagnose):
            return


def check_fused_softmax(report: Report, kernel: Any) -> None:
    rng = np.random.default_rng(11)
    shapes = [((1, 1), 0.0), ((3, 5), 0.0), ((2, 37), 0.0), ((2, 6), 1000.0), ((0, 4), 0.0)]

    def case_of(rows: int, cols: int, offset: float) -> str:
        blocks = max(rows, 1)
        large = " (values near 1000)" if offset else ""
        return f"{rows} x {cols}{large} ({blocks} block{'s' if blocks != 1 else ''} of {ROW_THREADS}, one per row)"

    report.plan([case_of(rows, cols, offset) for (rows, cols), offset in shapes])
    for (rows, cols), offset in shapes:
        x = (rng.standard_normal((rows, cols)) * 3 + offset).astype(np.float32)
        expected = softmax_reference(x, axis=-1)
        blocks = max(rows, 1)
        case = case_of(rows, cols, offset)
        y = np.full((rows, cols), UNWRITTEN, np.float32)
        with np.errstate(all="ignore"):
            overflow = "exp(1000) overflows float32; subtract the row's maximum before exp (softmax does not change)"
            if not run_kernel(report, case, kernel[blocks, ROW_THREADS], (x, y), overflow_hint=overflow):
                return

        def diagnose(actual: np.ndarray, x=x, cols=cols) -> str:
            if cols > ROW_THREADS and np.isnan(actual[:, ROW_THREADS:]).all() and not np.isnan(actual[:, 0]).any():
                return (
                    f"columns from {ROW_THREADS} (the block size) on were never written: each thread must loop "
                    f"over columns t, t + blockDim.x, t + 2 blockDim.x, ... for the max, the sum and the output"
                )
            if x.size and np.abs(x).max() > 80 and not np.isfinite(actual).all():
                return (
                    "exp overflowed: exp(1000) is inf in float32; subtract the row's maximum before exp "
                    "(softmax does not change, the numbers stay small)"
                )
            missing = unwritten_hint(actual, "every thread writes its columns of its row")
            return missing or (
                "y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r); the block's max and "
                "sum need every thread's partial and a cuda.syncthreads() before they are read"
            )

        if not compare(report, case, expected, y, f"x {show(x)}", _row_picture, diagnose):
            return


def _row_picture(wrong: np.ndarray) -> str:
    """Which (row = block, column) elements are wrong, and which thread of the block owns each column."""
    lines = [f"rows (one block each), X where wrong; column c belongs to thread c % {ROW_THREADS}:"]
    for r in range(min(wrong.shape[0], 8)):
        lines.append(f"  block {r:2d} | " + "".join("X" if w else "." for w in wrong[r]))
    if wrong.shape[0]:
        lines += ["", thread_picture_1d(wrong.any(axis=0), ROW_THREADS, owner=lambda c: c % ROW_THREADS)]
    return "\n".join(lines)
