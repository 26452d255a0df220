"""Checks of the exercises written in NumPy: the backward of matmul and of softmax, and DDP's gradient buckets.

Each runs in-process against nbcoll's own references (:func:`~nbcoll.kernels.matmul.matmul_reference`,
:func:`~nbcoll.kernels.softmax.softmax_backward_reference`) or against :func:`ddp_buckets_reference`, and
matches a failure against the results of the usual mistakes to name it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nbcoll.exercises.report import Report, exit_text, first_difference, show
from nbcoll.kernels.matmul import matmul_reference
from nbcoll.kernels.softmax import softmax_backward_reference, softmax_reference


def _call(report: Report, case: str, function: Callable, *args: Any) -> tuple[bool, Any]:
    report.begin(case)
    try:
        return True, function(*args)
    except SystemExit as exc:  # the function may not end the check: it fails this case instead
        report.fail(case, f"{function.__name__} exited the check during this case: it called {exit_text(exc)}")
    except NotImplementedError:
        report.fail(case, f"{function.__name__} is not written yet: it raises NotImplementedError")
    except Exception as exc:  # the learner's error is shown, not propagated
        report.fail(case, f"{function.__name__} raised {type(exc).__name__}: {exc}")
    return False, None


def check_matmul_backward(report: Report, function: Callable) -> None:
    rng = np.random.default_rng(5)
    shapes = ((1, 1, 1), (2, 3, 4), (5, 2, 3), (0, 3, 2))
    report.plan([f"a {m} x {k}, b {k} x {n}" for m, k, n in shapes])
    for m, k, n in shapes:
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        grad_out = rng.standard_normal((m, n))
        case = f"a {m} x {k}, b {k} x {n}"
        ok, result = _call(report, case, function, a, b, grad_out)
        if not ok:
            if "shape" in report.cases[-1].detail or "mismatch" in report.cases[-1].detail:
                report.cases[-1].detail += (
                    "\nhint: match the shapes: grad_a has a's shape (m x k) = (m x n) @ (n x k), so it is "
                    "grad_out @ b.T; grad_b has b's shape (k x n) = (k x m) @ (m x n), so it is a.T @ grad_out"
                )
            return
        expected = (matmul_reference(grad_out, b.T), matmul_reference(a.T, grad_out))
        inputs = f"a {show(a)}\nb {show(b)}\ngrad_out {show(grad_out)}"
        for name, want, got in zip(("grad_a", "grad_b"), expected, _pair(result), strict=True):
            difference = first_difference(want, np.asarray(got)) if got is not None else "returned no value"
            if difference:
                hint = _matmul_hint(name, np.asarray(got), a, b, grad_out)
                report.fail(case, f"input: {inputs}\n{name}: {difference}" + (f"\nhint: {hint}" if hint else ""))
                return
        report.add(case, True)


def _pair(result: Any) -> tuple[Any, Any]:
    return tuple(result) if isinstance(result, (tuple, list)) and len(result) == 2 else (None, None)


def _matmul_hint(name: str, got: np.ndarray, a: np.ndarray, b: np.ndarray, grad_out: np.ndarray) -> str:
    if name == "grad_a" and got.shape == a.shape and np.allclose(got, a):
        return "grad_a is a itself; it is grad_out @ b.T"
    if got.shape == (a.shape if name == "grad_a" else b.shape)[::-1]:
        return f"{name} is transposed: it must have the shape of {name[-1]}"
    if name == "grad_b" and grad_out.shape[0] == a.shape[0] and got.shape == b.shape:
        return "grad_b = a.T @ grad_out: each b[p, j] meets a[i, p] in every row i"
    return "grad_a = grad_out @ b.T and grad_b = a.T @ grad_out"


def check_softmax_backward(report: Report, function: Callable) -> None:
    rng = np.random.default_rng(6)
    shapes = ((1,), (4,), (3, 5), (2, 1), (0, 3))
    report.plan([f"y and dy of shape {shape}" for shape in shapes])
    for shape in shapes:
        y = softmax_reference(rng.standard_normal(shape), axis=-1)
        dy = rng.standard_normal(shape)
        case = f"y and dy of shape {shape}"
        ok, dx = _call(report, case, function, y, dy)
        if not ok:
            return
        expected = softmax_backward_reference(y, dy, axis=-1)
        difference = first_difference(expected, np.asarray(dx)) if dx is not None else "returned None"
        if difference:
            hint = _softmax_hint(np.asarray(dx), y, dy)
            report.fail(case, f"input: y {show(y)}\ndy {show(dy)}\n{difference}\nhint: {hint}")
            return
        report.add(case, True)


def _softmax_hint(dx: np.ndarray, y: np.ndarray, dy: np.ndarray) -> str:
    if dx.shape == y.shape and np.allclose(dx, y * dy):
        return (
            "y * dy leaves out what each x[j] does to every other output through the sum: "
            "dx = y * (dy - sum(dy * y)) along the last axis"
        )
    if y.ndim > 1 and dx.shape == y.shape and np.allclose(dx, y * (dy - (dy * y).sum(axis=0, keepdims=True))):
        return "the sum runs over the wrong axis: sum(dy * y) over the last axis, with keepdims=True"
    if dx.shape != y.shape:
        return f"dx must have y's shape {y.shape}; keep the summed axis (keepdims=True) so it broadcasts"
    return "dx = y * (dy - sum(dy * y)), the sum along the last axis, one value per row"


def ddp_buckets_reference(sizes: Sequence[int], cap: int) -> list[list[int]]:
    """DDP's buckets: parameter indices, walked from the last registered to the first, a bucket closing as
    soon as it holds at least ``cap`` bytes (so a bucket may pass the cap by its last parameter).

    Why reversed: backward produces gradients roughly in the reverse order of registration, so the first bucket
    to fill is the one of the last layers, and its all-reduce can start while backward goes on.
    """
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(sizes))):
        current.append(index)
        filled += sizes[index]
        if filled >= cap:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def check_ddp_buckets(report: Report, function: Callable) -> None:
    cases = [
        ("no parameters", [], 100),
        ("one parameter", [40], 100),
        ("every parameter fits in one bucket", [10, 20, 30], 100),
        ("a bucket closes when it reaches the cap exactly", [50, 50, 50, 50], 100),
        ("one parameter larger than the cap", [30, 400, 30, 30], 100),
        ("a model of 7 layers", [64, 8, 256, 16, 128, 8, 32], 150),
    ]
    report.plan([f"{name}: sizes {sizes}, cap {cap}" for name, sizes, cap in cases])
    for name, sizes, cap in cases:
        case = f"{name}: sizes {sizes}, cap {cap}"
        ok, got = _call(report, case, function, list(sizes), cap)
        if not ok:
            return
        expected = ddp_buckets_reference(sizes, cap)
        got = [list(map(int, bucket)) for bucket in got] if isinstance(got, (list, tuple)) else got
        if got != expected:
            report.fail(
                case, f"expected buckets {expected}\ngot              {got}\nhint: {_bucket_hint(got, sizes, cap)}"
            )
            return
        report.add(case, True)


def _bucket_hint(got: Any, sizes: Sequence[int], cap: int) -> str:
    if not isinstance(got, list):
        return "return a list of buckets, each a list of parameter indices"
    flat = [i for bucket in got for i in bucket]
    if flat == list(range(len(sizes))) or (flat and flat[0] == 0 and len(sizes) > 1):
        return (
            "buckets start from the last registered parameter: backward makes its gradient first, so walk "
            "the parameters in reverse order"
        )
    if all(sum(sizes[i] for i in bucket) <= cap for bucket in got) and any(s > cap for s in sizes) is False:
        return (
            "a bucket closes once it holds at least cap bytes, counting the parameter just added; "
            "closing before adding a parameter that would pass the cap makes different buckets"
        )
    return (
        "add the parameter to the open bucket first, then close the bucket when its bytes reach the cap "
        "(>= cap); the last bucket may stay under the cap"
    )
