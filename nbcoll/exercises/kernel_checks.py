"""Checks of the one-thread-one-element kernels: map, 2-D stencil, block reduction, scatter_add, batched copy.

Every check launches the learner's kernel on the simulator at sizes 0, 1 and sizes that are not multiples of the
block, compares with nbcoll's own NumPy reference, and draws which threads own the wrong elements.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.exercises.launching import UNWRITTEN, blocks_for, blocks_text, compare, run_kernel, unwritten_hint
from nbcoll.exercises.report import Report, show, thread_picture_1d, thread_picture_2d
from nbcoll.kernels.copy import CopyDescriptors, batched_copy_reference
from nbcoll.kernels.index import scatter_add_reference
from nbcoll.kernels.reduction import reduce_reference
from nbcoll.kernels.stencil import conv2d_reference

THREADS = 32
"""Threads per block of every 1-D exercise launch (the starters say so)."""

STENCIL_BLOCK = (8, 8)
"""Threads per block of the stencil, (rows, columns): threadIdx.x runs along columns."""


def _rng() -> np.random.Generator:
    return np.random.default_rng(2024)


def check_map(report: Report, kernel: Any) -> None:
    a, b = np.float32(2.5), np.float32(-1.0)
    rng = _rng()
    for n in (1, 33, 70, 0):
        case = f"n={n} ({blocks_text(blocks_for(n, THREADS), THREADS)})"
        x = rng.standard_normal(n).astype(np.float32)
        out = np.full(n, UNWRITTEN, np.float32)
        if not run_kernel(report, case, kernel[blocks_for(n, THREADS), THREADS], (x, out, a, b)):
            return

        def diagnose(actual: np.ndarray) -> str:
            return (
                unwritten_hint(
                    actual, "is i = blockIdx.x * blockDim.x + threadIdx.x, so each block starts after the one before?"
                )
                or "is it out[i] = a * x[i] + b, with a and b in that order?"
            )

        expected = (a * x + b).astype(np.float32)
        picture = lambda wrong: thread_picture_1d(wrong, THREADS)  # noqa: E731
        if not compare(report, case, expected, out, f"x {show(x)}, a={a}, b={b}", picture, diagnose):
            return


def check_stencil(report: Report, kernel: Any) -> None:
    rng = _rng()
    by, bx = STENCIL_BLOCK
    for x_shape, w_shape in (((1, 1), (1, 1)), ((5, 7), (3, 3)), ((12, 10), (2, 3)), ((2, 3), (3, 3))):
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        expected = conv2d_reference(x, w)
        rows, cols = expected.shape
        grid = (blocks_for(cols, bx), blocks_for(rows, by))
        case = f"x {x_shape}, w {w_shape} -> out {expected.shape} (grid {grid[0]} x {grid[1]} blocks of {bx} x {by})"
        out = np.full(expected.shape, UNWRITTEN, np.float32)
        if not run_kernel(report, case, kernel[grid, (bx, by)], (x, w, out)):
            return

        def diagnose(actual: np.ndarray, x=x, w=w, expected=expected) -> str:
            if expected.shape[0] != expected.shape[1] and np.isnan(actual).any():
                return (
                    "some elements were never written: with cuda.grid(2), the first index is x (along columns), "
                    "the second y (along rows); are row and column swapped?"
                )
            inner = conv2d_reference(x, w[:-1, :-1]) if min(w.shape) > 1 else np.zeros_like(expected)
            if np.allclose(actual, inner, rtol=1e-4, atol=1e-5):
                return (
                    "the last row and column of the filter are left out: loop a over range(KH), b over range(KW) "
                    "with KH, KW = w.shape"
                )
            return "out[r, c] sums x[r + a, c + b] * w[a, b] over a in range(KH), b in range(KW) (KH, KW = w.shape)"

        picture = lambda wrong: thread_picture_2d(wrong, (by, bx))  # noqa: E731
        if not compare(report, case, expected, out, f"x {show(x)}\nw {show(w)}", picture, diagnose):
            return


def check_block_reduce(report: Report, kernel: Any) -> None:
    rng = _rng()
    for n in (1, 45, 100, 0):
        blocks = blocks_for(n, THREADS)
        case = f"n={n} ({blocks_text(blocks, THREADS)})"
        x = rng.integers(-9, 10, n).astype(np.float32)  # small integers: sums are exact in any order
        expected = np.array(
            [reduce_reference("sum", x[b * THREADS : (b + 1) * THREADS]) for b in range(blocks)], np.float32
        )
        runs = []
        for _ in range(2):  # twice: a race shows as a result that changes from run to run
            partials = np.full(blocks, UNWRITTEN, np.float32)
            if not run_kernel(report, case, kernel[blocks, THREADS], (x, partials)):
                return
            runs.append(partials)

        def diagnose(actual: np.ndarray, runs=runs) -> str:
            if not np.array_equal(runs[0], runs[1], equal_nan=True):
                return (
                    "the result changes from run to run: threads read shared memory before the others wrote it; "
                    "call cuda.syncthreads() after the load and after every halving step"
                )
            missing = unwritten_hint(actual, "thread 0 of each block writes partials[blockIdx.x]")
            return missing or (
                "threads past the end must load 0 (the identity of sum), and every step must be "
                "followed by cuda.syncthreads()"
            )

        picture = lambda wrong: thread_picture_1d(wrong, THREADS, owner=lambda block: block * THREADS)  # noqa: E731
        if not compare(report, case, expected, runs[-1], f"x {show(x)}", picture, diagnose):
            return


def check_scatter_add(report: Report, kernel: Any) -> None:
    code = kernel.py_func.__code__
    rng = _rng()
    for m in (1, 33, 70, 0):
        case = f"{m} source elements into 5 slots ({blocks_text(blocks_for(m, THREADS), THREADS)})"
        index = rng.integers(0, 5, m).astype(np.int64)
        src = rng.integers(-4, 5, m).astype(np.float32)
        base = np.arange(5, dtype=np.float32)
        out = base.copy()
        hint = "thread i reads src[i] and adds it into out[index[i]]: the index says where to write, not where to read"
        if not run_kernel(report, case, kernel[blocks_for(m, THREADS), THREADS], (index, src, out), index_hint=hint):
            return
        expected = scatter_add_reference(base, index, src, axis=0)

        def diagnose(actual: np.ndarray, m=m, base=base) -> str:
            if m and np.array_equal(actual, base):
                return "out is unchanged: the kernel body is still empty (the starter's comments give the plan)"
            return "thread i adds src[i] into out[index[i]] (not out[i]); the source is indexed by i"

        picture = lambda wrong: f"wrong slots of out: {np.flatnonzero(wrong).tolist()}"  # noqa: E731
        if not compare(report, case, expected, out, f"index {show(index)}\nsrc {show(src)}", picture, diagnose):
            return
    if "atomic" not in code.co_names:
        report.fail(
            "atomic update",
            "the kernel never calls cuda.atomic.add: two threads with the same index read out[j], each adds its "
            "value and writes back, and one sum is lost.\nThe simulator runs threads one after another so it "
            "hides the race; a GPU does not. Use cuda.atomic.add(out, index[i], src[i]).",
        )
    else:
        report.add("atomic update", True)


def check_batched_copy(report: Report, kernel: Any) -> None:
    tables = [
        ("an empty table", [], [], []),
        ("one segment of 1", [4], [0], [1]),
        ("segments of 3, 0, 40 and 5", [0, 7, 10, 50], [60, 0, 3, 44], [3, 0, 40, 5]),
    ]
    src = np.arange(1, 61, dtype=np.float32)
    for name, src_off, dst_off, lengths in tables:
        table = CopyDescriptors.build(src_off, dst_off, lengths)
        blocks = blocks_for(table.total, THREADS)
        case = f"{name} ({table.total} elements, {blocks_text(blocks, THREADS)})"
        dst = np.full(64, -1.0, np.float32)
        args = (table.src_offsets, table.dst_offsets, table.starts, np.int64(table.total))
        if not run_kernel(report, case, kernel[blocks, THREADS], (dst, src, *args)):
            return
        expected = batched_copy_reference(np.full(64, -1.0, np.float32), src, table)
        owner = _batched_owner(table)

        def diagnose(actual: np.ndarray, expected=expected, owner=owner, starts=table.starts) -> str:
            if expected.size and (actual == -1.0).all() and (expected != -1.0).any():
                return "dst is unchanged: the kernel body is still empty (the starter's comments give the plan)"
            wrong_threads = {owner[int(e)] for e in np.flatnonzero(actual != expected) if int(e) in owner}
            if wrong_threads and wrong_threads <= {int(s) for s in starts}:
                return (
                    f"exactly the first thread of a segment is wrong (threads {sorted(wrong_threads)}, segments "
                    f"start at {starts.tolist()}): thread i belongs to the last k with starts[k] <= i, "
                    "not starts[k] < i"
                )
            stray = [int(e) for e in np.flatnonzero(actual != expected) if e not in owner]
            if stray:
                return (
                    f"dst elements outside every segment were written ({stray[:6]}): a thread copied past the "
                    "end of its segment, or a thread with i >= total did not return at once"
                )
            return (
                "thread i belongs to the last segment k with starts[k] <= i; it copies element j = i - starts[k] "
                "of that segment (check the comparison at segment boundaries)"
            )

        def picture(wrong: np.ndarray, owner=owner, total=table.total) -> str:
            per_thread = np.zeros(total, bool)
            for element, thread in owner.items():
                per_thread[thread] = wrong[element]
            return thread_picture_1d(per_thread, THREADS)

        inputs = f"src {show(src)}\ntable src_offsets={src_off}, dst_offsets={dst_off}, lengths={lengths}"
        if not compare(report, case, expected, dst, inputs, picture, diagnose):
            return


def _batched_owner(table: CopyDescriptors) -> dict[int, int]:
    """dst element -> the thread that copies it."""
    owner = {}
    for k in range(table.lengths.size):
        for j in range(int(table.lengths[k])):
            owner[int(table.dst_offsets[k]) + j] = int(table.starts[k]) + j
    return owner
