"""What a wrong kernel output looks like, named, so that a check chooses its hint by the symptom.

The rule: the symptoms are tested in this order, and the first that fits names the output::

    symptom      what the output shows                                    the usual cause
    CHANGES      two runs of the same launch give different results       a race: a missing cuda.syncthreads()
    NOTHING      no element was written                                   the kernel body is still empty
    BLOCKS       some blocks wholly wrong, every other block right        the block's offset, blockIdx.x * blockDim.x
    LAST         only the last elements (2-D: the last rows or columns)   the bound check is off by one
                 are wrong or never written                               (i < n - 1 where i < n is meant)
    SPREAD       wrong elements spread over a block, the others right     threads read shared memory before the
                                                                          others wrote it: synchronisation
    EVERYWHERE   every element wrong                                      the formula itself

``BLOCKS`` comes before ``LAST``: when the wrong elements are exactly the last blocks, the block offset is the
likelier mistake (a bound off by one leaves out one element, not a block). A check that knows the result of a
usual mistake (the last partial tile skipped, say) tests that first, since it names the mistake better still;
then it takes the hint for the symptom from its own table, in words about its kernel.

Example::

    classify(np.array([False, False, True]))                            # LAST
    classify(np.array([False, True, True]), block_of=np.array([0, 1, 1]))  # BLOCKS
"""

from __future__ import annotations

import numpy as np

CHANGES = "changes between runs"
NOTHING = "nothing written"
BLOCKS = "whole blocks wrong"
LAST = "the last elements wrong"
SPREAD = "spread over a block"
EVERYWHERE = "every element wrong"
RIGHT = "right"

ORDER = (CHANGES, NOTHING, BLOCKS, LAST, SPREAD, EVERYWHERE)
"""The symptoms in the order :func:`classify` tests them."""


def classify(
    wrong: np.ndarray,
    unwritten: np.ndarray | None = None,
    block_of: np.ndarray | None = None,
    changes: bool = False,
) -> str:
    """The symptom of an output whose wrong elements are ``wrong`` (a boolean array, 1-D or 2-D).

    ``unwritten``: the elements no thread wrote (default: none). ``block_of``: the block of each element, an array
    of ``wrong``'s shape (without it, ``BLOCKS`` is not tested: say, one partial per block). ``changes``: two
    runs of the launch differed.

    >>> classify(np.array([False, False, True]))
    'the last elements wrong'
    >>> classify(np.array([True, False, True, False]), block_of=np.array([0, 0, 1, 1]))
    'spread over a block'
    """
    wrong = np.asarray(wrong, bool)
    unwritten = np.zeros_like(wrong) if unwritten is None else np.asarray(unwritten, bool)
    wrong = wrong | unwritten
    if changes:
        return CHANGES
    if not wrong.any():
        return RIGHT
    if unwritten.all():
        return NOTHING
    if wrong.all():
        return EVERYWHERE
    if block_of is not None and _whole_blocks(wrong, np.asarray(block_of)):
        return BLOCKS
    if _at_the_end(wrong):
        return LAST
    return SPREAD


def _whole_blocks(wrong: np.ndarray, block_of: np.ndarray) -> bool:
    """Every block is wholly wrong or wholly right (and, as the caller knows, some of each)."""
    return all(wrong[block_of == b].all() or not wrong[block_of == b].any() for b in np.unique(block_of))


def _at_the_end(wrong: np.ndarray) -> bool:
    """The wrong elements are the last ones: a 1-D suffix, or (2-D) whole rows at the bottom and whole columns at
    the right."""
    if wrong.ndim == 1:
        first = int(np.flatnonzero(wrong)[0])
        return bool(wrong[first:].all())
    rows = _trailing(wrong.all(axis=1))
    cols = _trailing(wrong.all(axis=0))
    end = np.zeros_like(wrong)
    if rows:
        end[-rows:, :] = True
    if cols:
        end[:, -cols:] = True
    return bool((rows or cols) and np.array_equal(end, wrong))


def _trailing(flags: np.ndarray) -> int:
    """How many of the last ``flags`` are all True."""
    count = 0
    for flag in flags[::-1]:
        if not flag:
            break
        count += 1
    return count


def blocks_1d(n: int, threads: int) -> np.ndarray:
    """The block of each of ``n`` elements, one thread per element: ``i // threads``."""
    return np.arange(n) // threads


def blocks_2d(shape: tuple[int, int], block: tuple[int, int]) -> np.ndarray:
    """The block of each element of a 2-D output, blocks of ``block = (rows, columns)`` threads, as one number."""
    rows, cols = np.indices(shape)
    by, bx = block
    return (rows // by) * (-(-shape[1] // bx) or 1) + cols // bx
