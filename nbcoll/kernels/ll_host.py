"""An LL step on the CPU, compiled: the ``numpy`` backend's write and poll of :mod:`nbcoll.kernels.ll`'s lines.

On a GPU an LL step's write is one launch and its poll another. On the ``numpy`` backend the same work is a few
loads and stores, and what costs is the Python around them: a replayed 8-byte all-gather spent about half its call
in its step, for about a microsecond of loads and stores (the Performance page has the figures). With
``NBCOLL_LL_COMPILED=1`` the step's loops run compiled there (``numba.njit``), over every segment and every peer
in one call, as a GPU runs them in its kernels. They are the loops the kernels run::

    write:  for k: for i < count:  lines[line_at[k] + i] = flag << 32 | words[word_at[k] + i]
    copy:   for i < count:  dest[dest_at + i] = src[src_at + i]        (this rank's own block, as words)
    poll:   for each source k whose lines are not yet known complete (complete[k] != round_):
                if every line of sources[k][line_at : line_at + count] carries flag (the last one first):
                    for i < count:  dests[k][dest_at[k] + i] = low half of sources[k][line_at + i]
                    complete[k] = round_
            returns how many sources are still incomplete

Each store is one aligned 8-byte access, as in the kernel and the NumPy reference, so a reader never sees a flag
without its data. A step that writes ``NBCOLL_STREAM_SHARED_BYTES`` of lines or more (16 KiB) stores them in
streaming stores, which do not first take each line back from the cache of the peer that polled it
(:mod:`nbcoll.kernels.stream_copy`), and an uncompiled one writes them through :func:`stream_store`, the same loop:
a streaming store is one 8-byte access too.

A poll is one look with no spin inside: the watchdog calls it again, so no load can be hoisted out of a wait. A
poll that finds a source complete puts its words where they go in the same pass: the snapshot a fold reads, or
the output block itself.

Example::

    >>> import numpy as np
    >>> from nbcoll.kernels import ll_host
    >>> lines = np.zeros(4, np.uint64)                       # a writer's lines
    >>> ll_host.write(lines, np.array([0]), np.arange(7, 11, dtype=np.uint32), np.array([0]), 4, 5)   # round 5
    >>> out, complete = np.zeros(6, np.uint32), np.zeros(1, np.int64)
    >>> ll_host.poll((lines,), 0, 4, 5, complete, 5, (out,), np.array([2])), out
    (0, array([ 0,  0,  7,  8,  9, 10], dtype=uint32))
    >>> ll_host.poll((lines,), 0, 4, 6, complete, 6, (out,), np.array([2]))   # round 6 not written yet
    1
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nbcoll.kernels.ll import DATA_MASK, ROUND_SHIFT
from nbcoll.kernels.stream_copy import store_fence, stream_word

# cache=True: a process loads the compiled loops from __pycache__ instead of compiling them again (about a second).
# boundscheck=True: an index past an array raises IndexError instead of writing into whatever memory follows, which
# here may be a peer's mapped buffer; each check is one comparison beside a load or store.
# ``flag`` is the round's 32-bit flag (``wrapped(round_)``), not ``flag_of(round_)``: Numba passes every Python int
# as an int64, which a flag in the high half overflows from round 2**31. It is made unsigned before any arithmetic,
# as Numba takes a mix of int64 and uint64 to float64.


@njit(cache=True, boundscheck=True)
def write(lines, line_at, words, word_at, count, flag, stream=False):  # pragma: no cover (compiled)
    """``for k, i: lines[line_at[k] + i] = flag << 32 | words[word_at[k] + i]``: each segment ``k`` of this rank's
    words into its lines (one segment; an all-to-all's or a reduce-scatter's one per peer). ``stream``: in
    streaming stores, then a store fence (``NBCOLL_STREAM_SHARED_BYTES``; :mod:`nbcoll.kernels.stream_copy`)."""
    high = np.uint64(flag) << ROUND_SHIFT
    base = np.int64(lines.ctypes.data)  # signed: uint64 with int64 is float64
    for k in range(line_at.size):
        line, word = line_at[k], word_at[k]
        if stream:  # stores by address are not bounds-checked: check the segment once
            if line < 0 or word < 0 or line + count > lines.size or word + count > words.size:
                raise IndexError("ll_host.write: a segment past the lines or the words")
            for i in range(count):
                stream_word(base + 8 * (line + i), high | np.uint64(words[word + i]))
        else:
            for i in range(count):
                lines[line + i] = high | words[word + i]
    if stream:
        store_fence()


_FIRST = np.zeros(1, np.int64)  # one segment, from the first line and the first word


def stream_store(lines: np.ndarray, words: np.ndarray, flag_high: int) -> None:
    """``for i: lines[i] = flag_high | words[i]`` (:func:`nbcoll.kernels.ll.store_reference`) in streaming stores,
    each line one aligned 8-byte access, then a store fence: the ``numpy`` backend's LL write with
    ``NBCOLL_STREAM_SHARED_BYTES``. ``lines`` and ``words`` are of one size (the LL step cut them so)."""
    write(lines, _FIRST, words, _FIRST, lines.size, flag_high >> ROUND_SHIFT, True)


@njit(cache=True, boundscheck=True)
def copy(dest, dest_at, src, src_at, count):  # pragma: no cover (compiled)
    """``for i < count: dest[dest_at + i] = src[src_at + i]``: this rank's own block of an all-gather's or an
    all-to-all's output, in words (``dest`` and ``src`` are the same words, or apart: the collective checked)."""
    for i in range(count):
        dest[dest_at + i] = src[src_at + i]


@njit(cache=True, boundscheck=True)
def poll(sources, line_at, count, flag, complete, round_, dests, dest_at):  # pragma: no cover (compiled)
    """One look at every source not yet complete in ``round_`` (whose lines carry ``flag``); the words of each
    complete one into its destination. Returns how many sources are still incomplete."""
    flag = np.uint64(flag)
    last = line_at + count - 1
    incomplete = 0
    for k in range(len(sources)):
        if complete[k] == round_:
            continue
        lines = sources[k]
        # a writer on a CPU stores its lines in order: until the last one carries the round, the rest need no look
        if count and lines[last] >> ROUND_SHIFT != flag:
            incomplete += 1
            continue
        missing = 0
        for i in range(count):
            missing += lines[line_at + i] >> ROUND_SHIFT != flag
        if missing:
            incomplete += 1
            continue
        dest, at = dests[k], dest_at[k]
        for i in range(count):
            dest[at + i] = lines[line_at + i] & DATA_MASK
        complete[k] = round_
    return incomplete
