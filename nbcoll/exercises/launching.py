"""Running a learner's kernel on the simulator: the launch, and the sentences that explain what went wrong.

Example::

    out = np.full(n, np.nan, np.float32)
    if run_kernel(report, "n=33", kernel[2, 32], (x, out)):
        compare(report, "n=33", expected, out, picture=lambda wrong: thread_picture_1d(wrong, 32))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nbcoll.exercises.report import Report, exit_text, first_difference, wrong_mask

UNWRITTEN = np.float32(np.nan)
"""What an output holds before the kernel runs, so that an element no thread wrote shows as ``nan``."""


def blocks_for(n: int, threads: int) -> int:
    """Blocks for ``n`` elements, at least one: a launch on an empty input still runs a block, as a bounds check
    must handle."""
    return max(1, -(-n // threads))


def blocks_text(blocks: int, threads: int) -> str:
    """``"2 blocks of 32"``, for case names."""
    return f"{blocks} block{'s' if blocks != 1 else ''} of {threads}"


def run_kernel(
    report: Report,
    case: str,
    launch: Callable[..., None],
    args: tuple,
    index_hint: str = "",
    overflow_hint: str = "",
) -> bool:
    """``launch(*args)`` (a configured kernel, ``kernel[grid, block]``); on an error, record a failed ``case`` whose
    message says what the error usually means.

    ``index_hint`` and ``overflow_hint`` add what an out-of-bounds index or an overflow means in this exercise.
    """
    report.begin(case)
    try:
        launch(*args)
    except SystemExit as exc:  # the kernel may not end the check: it fails this case instead
        report.fail(case, f"the kernel exited the check during this case: it called {exit_text(exc)}")
        return False
    except IndexError as exc:
        report.fail(
            case,
            f"a thread indexed outside an array: {exc}\n"
            "(tid is the thread's threadIdx, ctaid its blockIdx). A grid has more threads than elements whenever n "
            "is not a multiple of the block size:\ncheck the index against the array's size before every read and "
            "write (missing bounds check?)" + (f"\nhint: {index_hint}" if index_hint else ""),
        )
        return False
    except OverflowError as exc:
        report.fail(
            case, f"a value overflowed in a thread: {exc}" + (f"\nhint: {overflow_hint}" if overflow_hint else "")
        )
        return False
    except Exception as exc:  # whatever the learner's kernel raises is shown, not propagated
        report.fail(case, f"the kernel raised {type(exc).__name__}: {exc}")
        return False
    return True


def compare(
    report: Report,
    case: str,
    expected: np.ndarray,
    actual: np.ndarray,
    inputs: str,
    picture: Callable[[np.ndarray], str] | None = None,
    diagnose: Callable[[np.ndarray], str] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> bool:
    """Record ``case`` as passed, or failed with the inputs, the first wrong element, a hint and a thread picture."""
    difference = first_difference(expected, actual, rtol, atol)
    if not difference:
        report.add(case, True)
        return True
    hint = ""
    if expected.size and np.isnan(actual).all():  # the symptom NOTHING (nbcoll.exercises.symptoms)
        hint = "no thread wrote anything: the kernel body is still empty (the starter's comments give the plan)"
        if expected.size == 1:  # one element: a bound off by one leaves out all there is
            hint += (
                "; or, if it is written, its bound check is off by one and leaves out the only element "
                "(i < n, not i < n - 1)"
            )
    elif diagnose is not None:
        hint = diagnose(actual)
    detail = f"input: {inputs}\n{difference}"
    if hint:
        detail += f"\nhint: {hint}"
    shown = picture(wrong_mask(expected, actual, rtol, atol)) if picture and expected.shape == actual.shape else ""
    report.add(case, False, detail, shown)
    return False


def unwritten_hint(actual: np.ndarray, what: str) -> str:
    """A hint when some (not all) elements were never written: which ones."""
    missing = np.isnan(actual)
    if not missing.any():
        return ""
    first = tuple(int(i) for i in np.argwhere(missing)[0])
    count = int(missing.sum())
    return f"{count} element{' was' if count == 1 else 's were'} never written (first at {list(first)}): {what}"
