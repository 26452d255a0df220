"""What every model-parallel script shares: comparing with the one-process reference, bad use, and its main.

Each strategy trains the same model on n ranks and in one process (every rank runs the reference itself), in
float64, and compares: :func:`close` for one array, :func:`compare_states` for whole state dicts (float32 toy
cases pass their own ``rtol``). :func:`main` is the command line of ``tensor_parallel.py``, ``pipeline.py``,
``expert_parallel.py`` and ``hybrid_parallel.py``: ``mpiexec -n 4 python <script>.py [--steps K]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

import nbcoll

RTOL, ATOL = 1e-10, 1e-12


def close(got, want, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol, err_msg=what)


def compare_states(got: dict, want: dict, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    """The same names, and every value within ``rtol`` of the reference's."""
    assert set(got) == set(want), (what, sorted(set(got) ^ set(want)))
    for name in want:
        close(got[name], want[name], f"{what}: {name}", rtol, atol)


def expect_error(fn: Callable[[], object], words: list[str], errors: tuple = (ValueError,)) -> None:
    """``fn()`` raises one of ``errors`` whose message has every one of ``words``."""
    try:
        fn()
    except errors as exc:
        for word in words:
            assert word in str(exc), f"error message {str(exc)!r} lacks {word!r}"
    else:
        raise AssertionError(f"no error for bad use ({words})")


def main(name: str, run: Callable, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """Parse ``--steps`` (and what ``add_arguments`` adds), then ``run(comm, args)`` in float64 on every rank."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args()
    nbcoll.set_default_dtype(np.float64)
    comm = nbcoll.init()
    cases = run(comm, args)
    comm.destroy()
    print(f"rank {comm.rank}: {name} ok: {cases} cases", flush=True)
