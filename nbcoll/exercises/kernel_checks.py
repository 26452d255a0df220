"""Checks of the one-thread-one-element kernels: map, 2-D stencil, block reduction, scatter_add, batched copy.

Every check launches the learner's kernel on the simulator at sizes 0, 1 and sizes that are not multiples of the
block, compares with nbcoll's own NumPy reference, and draws which threads own the wrong elements. The hint is
chosen by the symptom (:mod:`nbcoll.exercises.symptoms`: the last elements wrong, whole blocks, ...), after the
results of the usual mistakes that a check can compute.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcoll.exercises import symptoms
from nbcoll.exercises.launching import UNWRITTEN, blocks_for, blocks_text, compare, run_kernel, unwritten_hint
from nbcoll.exercises.report import Report, show, thread_picture_1d, thread_picture_2d, wrong_mask
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


MAP_HINTS = {
    symptoms.BLOCKS: "is i = blockIdx.x * blockDim.x + threadIdx.x, so each block starts after the one before?",
    symptoms.LAST: (
        "only the last elements are wrong: the bound check is off by one; write out[i] when i < out.size "
        "(i < out.size - 1 leaves out the last element)"
    ),
}
"""The map's hints by symptom; any other symptom gets the formula's hint."""


def check_map(report: Report, kernel: Any) -> None:
    a, b = np.float32(2.5), np.float32(-1.0)
    rng = _rng()
    sizes = (1, 33, 70, 0)
    report.plan([f"n={n} ({blocks_text(blocks_for(n, THREADS), THREADS)})" for n in sizes])
    for n in sizes:
        case = f"n={n} ({blocks_text(blocks_for(n, THREADS), THREADS)})"
        x = rng.standard_normal(n).astype(np.float32)
        out = np.full(n, UNWRITTEN, np.float32)
        if not run_kernel(report, case, kernel[blocks_for(n, THREADS), THREADS], (x, out, a, b)):
            return
        expected = (a * x + b).astype(np.float32)

        def diagnose(actual: np.ndarray, expected=expected, n=n) -> str:
            found = symptoms.classify(wrong_mask(expected, actual), np.isnan(actual), symptoms.blocks_1d(n, THREADS))
            hint = MAP_HINTS.get(found, "is it out[i] = a * x[i] + b, with a and b in that order?")
            return unwritten_hint(actual, hint) or hint

        picture = lambda wrong, n=n: thread_picture_1d(wrong, THREADS, blocks=blocks_for(n, THREADS))  # noqa: E731
        if not compare(report, case, expected, out, f"x {show(x)}, a={a}, b={b}", picture, diagnose):
            return


STENCIL_HINTS = {
    symptoms.BLOCKS: "row = blockIdx.y * blockDim.y + threadIdx.y and col likewise in x: cuda.grid(2) gives (col, row)",
    symptoms.LAST: (
        "only the last rows or columns of out are wrong: a bound check is off by one; out has H - KH + 1 rows and "
        "W - KW + 1 columns: write when r < out.shape[0] and c < out.shape[1]"
    ),
}
"""The stencil's hints by symptom, after the usual mistakes it can compute (swapped axes, the filter cut short)."""


def check_stencil(report: Report, kernel: Any) -> None:
    rng = _rng()
    by, bx = STENCIL_BLOCK
    shapes = (((1, 1), (1, 1)), ((5, 7), (3, 3)), ((12, 10), (2, 3)), ((2, 3), (3, 3)))

    def case_of(x_shape: tuple[int, int], w_shape: tuple[int, int]) -> str:
        rows, cols = max(x_shape[0] - w_shape[0] + 1, 0), max(x_shape[1] - w_shape[1] + 1, 0)
        grid = (blocks_for(cols, bx), blocks_for(rows, by))
        return f"x {x_shape}, w {w_shape} -> out {(rows, cols)} (grid {grid[0]} x {grid[1]} blocks of {bx} x {by})"

    report.plan([case_of(*shape) for shape in shapes])
    for x_shape, w_shape in shapes:
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        expected = conv2d_reference(x, w)
        rows, cols = expected.shape
        grid = (blocks_for(cols, bx), blocks_for(rows, by))
        case = case_of(x_shape, w_shape)
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
            found = symptoms.classify(
                wrong_mask(expected, actual), np.isnan(actual), symptoms.blocks_2d(expected.shape, (by, bx))
            )
            hint = STENCIL_HINTS.get(
                found, "out[r, c] sums x[r + a, c + b] * w[a, b] over a in range(KH), b in range(KW) (KH, KW = w.shape)"
            )
            return unwritten_hint(actual, hint) or hint

        picture = lambda wrong: thread_picture_2d(wrong, (by, bx))  # noqa: E731
        if not compare(report, case, expected, out, f"x {show(x)}\nw {show(w)}", picture, diagnose):
            return


REDUCE_HINTS = {
    symptoms.LAST: (
        "only the last block's partial is wrong: the threads at the end of x load the wrong value; the load's "
        "bound is off by one? load x[i] when i < x.size (not x.size - 1), and 0 past the end"
    ),
    symptoms.SPREAD: (
        "partials of several blocks are wrong, not only the last: threads read shared memory before the others "
        "wrote it; call cuda.syncthreads() after the load and after every halving step"
    ),
}
"""The block reduction's hints by symptom (each partial is one element; there are no blocks of elements)."""


def _block_sums(x: np.ndarray, blocks: int) -> np.ndarray:
    return np.array([reduce_reference("sum", x[b * THREADS : (b + 1) * THREADS]) for b in range(blocks)], np.float32)


def check_block_reduce(report: Report, kernel: Any) -> None:
    rng = _rng()
    sizes = (1, 45, 100, 0)
    report.plan([f"n={n} ({blocks_text(blocks_for(n, THREADS), THREADS)})" for n in sizes])
    for n in sizes:
        blocks = blocks_for(n, THREADS)
        case = f"n={n} ({blocks_text(blocks, THREADS)})"
        x = rng.integers(-9, 10, n).astype(np.float32)  # small integers: sums are exact in any order
        expected = _block_sums(x, blocks)
        runs = []
        for _ in range(2):  # twice: a race shows as a result that changes from run to run
            partials = np.full(blocks, UNWRITTEN, np.float32)
            if not run_kernel(report, case, kernel[blocks, THREADS], (x, partials)):
                return
            runs.append(partials)

        def diagnose(actual: np.ndarray, runs=runs, x=x, expected=expected, blocks=blocks) -> str:
            changes = not np.array_equal(runs[0], runs[1], equal_nan=True)
            if changes:  # the symptom CHANGES
                return (
                    "the result changes from run to run: threads read shared memory before the others wrote it; "
                    "call cuda.syncthreads() after the load and after every halving step"
                )
            if x.size and np.array_equal(actual, _block_sums(np.append(x[:-1], 0), blocks)):
                return (
                    f"the last element of x (x[{x.size - 1}]) is left out of the sum: the load's bound is off by "
                    "one; load x[i] when i < x.size (not i < x.size - 1), and 0 past the end"
                )
            missing = unwritten_hint(actual, "thread 0 of each block writes partials[blockIdx.x]")
            found = symptoms.classify(wrong_mask(expected, actual), np.isnan(actual))
            return missing or REDUCE_HINTS.get(
                found, "threads past the end must load 0 (the identity of sum), then the tree adds pairs"
            )

        def picture(wrong: np.ndarray) -> str:
            return thread_picture_1d(wrong, THREADS, owner=lambda block: block * THREADS)

        if not compare(report, case, expected, runs[-1], f"x {show(x)}", picture, diagnose):
            return


def check_scatter_add(report: Report, kernel: Any) -> None:
    code = kernel.py_func.__code__
    rng = _rng()
    sizes = (1, 33, 70, 0)
    names = [f"{m} source elements into 5 slots ({blocks_text(blocks_for(m, THREADS), THREADS)})" for m in sizes]
    report.plan([*names, "atomic update"])
    for m in sizes:
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

    def case_of(name: str, lengths: list[int]) -> str:
        total = sum(lengths)
        return f"{name} ({total} elements, {blocks_text(blocks_for(total, THREADS), THREADS)})"

    report.plan([case_of(name, lengths) for name, _, _, lengths in tables])
    for name, src_off, dst_off, lengths in tables:
        table = CopyDescriptors.build(src_off, dst_off, lengths)
        blocks = blocks_for(table.total, THREADS)
        case = case_of(name, lengths)
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

        def picture(wrong: np.ndarray, owner=owner, total=table.total, blocks=blocks) -> str:
            per_thread = np.zeros(total, bool)
            for element, thread in owner.items():
                per_thread[thread] = wrong[element]
            return thread_picture_1d(per_thread, THREADS, blocks=blocks)

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
