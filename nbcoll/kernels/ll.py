"""The LL ("low latency") line: 4 bytes of data and the 4-byte flag that says they are there, in one 8-byte word.

A FIFO or a window announces data with a separate counter: write the data, make it visible, then write the flag,
and the reader polls the flag before it reads the data. That is two writes with an ordering between them, and on
the reader's side two reads. NCCL's LL protocol puts the flag *inside* the data: every 8-byte line holds one
32-bit data word and a 32-bit flag (the round number), written with one 8-byte store and read with one 8-byte
load. A reader that sees the round's flag in a line has that line's data too, whatever order the writes reached
memory in, so the writer needs no fence and the reader no separate flag to wait for::

    store:  for i: lines[i] = flag_high | words[i]           flag_high = round << 32
    load:   for i: line = lines[i]                            (one 8-byte load, kept in a register)
                   words[i] = line & 0xFFFFFFFF
                   missing += (line & 0xFFFFFFFF00000000) != flag_high

A load that counts ``missing == 0`` has read every line of the round at once, so ``words`` is a consistent
snapshot of what the writer wrote. The price is bandwidth: half of every line is flag, which is why LL serves
small messages only. A third kernel reads the flags alone, to learn which round a writer has reached::

    rounds: for i: rounds[i] = lines[i] >> 32                 (then began(rounds[i], r): round r or a later one)

Example::

    >>> import numpy as np
    >>> from nbcoll.kernels import ll
    >>> lines = np.zeros(3, np.uint64)
    >>> ll.store(lines, np.array([7, 8, 9], np.uint32), round_=5)
    >>> words = np.zeros(3, np.uint32)
    >>> ll.load(words, lines, round_=5), words           # every line carries round 5: nothing missing
    (0, array([7, 8, 9], dtype=uint32))
    >>> ll.load(words, lines, round_=6)                  # round 6 has not been written: 3 lines missing
    3
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import launch_1d
from nbcoll.kernels.registry import register

LINE_BYTES = 8
"""Bytes of one line: a word of data and its round, stored and loaded with one access."""
WORD_BYTES = 4
"""Bytes of data one line carries."""
DATA_MASK = np.uint64(0xFFFFFFFF)
FLAG_MASK = np.uint64(0xFFFFFFFF00000000)
_FLAG_WORD = 1 if sys.byteorder == "little" else 0  # which 32-bit half of a line holds its flag
SCALAR_LINES = 16
"""Up to this many lines the NumPy reference reads them as Python ints (a poll of a small message, a probe)."""
SCALAR_STORES = 4
"""Up to this many lines it writes them one Python int at a time (a presence line, a message of a few words)."""
MAX_ROUND = 0xFFFFFFFF
"""The flag is 32 bits: rounds count up to this many, then start again at 1 (a reader tells rounds apart only
from the one before it in the same buffer, so a wrap-around is harmless)."""
ROUND_SHIFT = np.uint64(32)


def wrapped(round_: int) -> int:
    """What the 32-bit flag of round ``round_`` holds: 1, 2, ..., MAX_ROUND, then 1 again (never 0)."""
    return (round_ - 1) % MAX_ROUND + 1


def flag_of(round_: int) -> int:
    """``round_ << 32``: the high half of every line of that round, as a Python int. Every step of every round
    makes one, so it is not a NumPy scalar, which costs more to make than the rest of the step's rearming: the
    launches make one where a kernel or a ufunc needs its type."""
    return wrapped(round_) << 32


def began(carried: int, round_: int) -> bool:
    """Whether a line that carries round ``carried`` (as :func:`load_rounds` reads it) was written in ``round_`` or
    a later round.

    Rounds wrap at :data:`MAX_ROUND`, so "later" means "less than half the cycle ahead". A line never written
    carries 0, which is behind every round of the first half of the cycle, and by the second every line has
    been written.
    """
    return (carried - wrapped(round_)) % MAX_ROUND < MAX_ROUND // 2


# ---------------------------------------------------------------------------------------------------------------
# NumPy references. The store goes through a ufunc, which writes each aligned 8-byte element with one access (a
# plain copy may use string instructions that promise no such thing); the load reads each flag with one access.


def store_reference(lines: np.ndarray, words: np.ndarray, flag_high: int) -> None:
    """``for i: lines[i] = flag_high | words[i]``."""
    if lines.size <= SCALAR_STORES:  # a presence line, a word or two: Python ints cost less than a ufunc
        flag = int(flag_high)
        for i, word in enumerate(words.tolist()):
            lines[i] = flag | word  # one aligned 8-byte store, as below
        return
    np.bitwise_or(words, np.uint64(flag_high), out=lines, casting="unsafe")


def load_reference(words: np.ndarray, lines: np.ndarray, flag_high: int, missing: np.ndarray) -> int:
    """``missing[0]`` = lines whose high half is not ``flag_high``, which it returns; when none is missing,
    ``for i: words[i] = low half of lines[i]`` (the kernel copies the words of a round not yet complete too, and
    no caller reads them)."""
    if lines.size <= SCALAR_LINES:  # a few lines: their flags as Python ints cost less than array temporaries
        values, flag = lines.tolist(), int(flag_high) >> 32  # one aligned 8-byte load per line, as below
        count = len(values) - [value >> 32 for value in values].count(flag)
        missing[0] = count
        if not count:  # a poll that fails, most of them, stops here; else a second pass, as below
            words[...] = lines  # each line cast to uint32 keeps its low half
        return count
    # Two passes, flags then data, read what the kernel's single load reads: a flag of this round was stored with
    # its data in one 8-byte store, and the writer stores into these lines again only after this rank has begun
    # its next round (see nbcoll.comm.ll), so the data stay as they were while they are copied. A poll that
    # fails costs the first pass only.
    count = int(np.count_nonzero(lines.view(np.uint32)[_FLAG_WORD::2] != int(flag_high) >> 32))
    missing[0] = count
    if not count:
        np.copyto(words, lines, casting="unsafe")  # each line converted to uint32 keeps its low half
    return count


def first_round_reference(probe: np.ndarray, lines: np.ndarray) -> int:
    """``lines[0] >> 32``, returned: the round a peer's first line carries (``probe`` is the kernel's scratch)."""
    return int(lines[0]) >> 32


def rounds_reference(rounds: np.ndarray, lines: np.ndarray) -> None:
    """``for i: rounds[i] = lines[i] >> 32``: the round each line carries."""
    if lines.size <= SCALAR_LINES:  # a line or two: Python ints cost less than a ufunc
        rounds[...] = [value >> 32 for value in lines.tolist()]  # one aligned 8-byte load per line
        return
    np.right_shift(lines, ROUND_SHIFT, out=rounds, casting="unsafe")


# ---------------------------------------------------------------------------------------------------------------
# Kernels.


@register("void(uint64[::1], uint32[::1], uint64)")
@cuda.jit
def ll_store_kernel(lines, words, flag_high):
    # One thread writes one line with a single 8-byte store, so no reader can see its flag without its data.
    i = cuda.grid(1)
    if i < lines.size:
        lines[i] = flag_high | words[i]


@register("void(uint32[::1], uint64[::1], uint64, int32[::1])")
@cuda.jit
def ll_load_kernel(words, lines, flag_high, missing):
    # One thread reads one line with a single 8-byte load and keeps its data word; a stale flag counts it missing.
    # Each poll is a new launch, so no load is hoisted out of a spin loop (what a volatile read guards against).
    i = cuda.grid(1)
    if i < lines.size:
        line = lines[i]
        words[i] = line & DATA_MASK
        if (line & FLAG_MASK) != flag_high:
            cuda.atomic.add(missing, 0, 1)


@register("void(uint32[::1], uint64[::1])")
@cuda.jit
def ll_rounds_kernel(rounds, lines):
    # One thread reads one line with a single 8-byte load and keeps its flag half: the round its writer reached.
    i = cuda.grid(1)
    if i < lines.size:
        rounds[i] = lines[i] >> ROUND_SHIFT


# ---------------------------------------------------------------------------------------------------------------
# Launch functions. ``store_lines`` and ``load_lines`` run once per chunk of a small collective, without checks: the
# collective checked its buffers when it was called. ``store`` and ``load`` are the checked entries.


@dispatch(reference=store_reference)
def store_lines(lines: Any, words: Any, flag_high: int) -> None:
    """``store`` without checks, for a flag already made by :func:`flag_of`."""
    launch_1d(ll_store_kernel, lines.size, lines, words, np.uint64(flag_high))


@dispatch(reference=load_reference)
def load_lines(words: Any, lines: Any, flag_high: int, missing: Any) -> int:
    """``load`` without checks, into a given ``missing``: the poll of a step, which returns the count."""
    missing[0] = 0  # one element written to the device: the kernel counts up from it
    launch_1d(ll_load_kernel, lines.size, words, lines, np.uint64(flag_high), missing)
    return int(memory.to_host(missing)[0])


@dispatch(reference=rounds_reference)
def load_rounds(rounds: Any, lines: Any) -> None:
    """``rounds`` without checks, into a given ``uint32`` array: what a writer polls before it reuses its lines."""
    launch_1d(ll_rounds_kernel, lines.size, rounds, lines)


@dispatch(reference=first_round_reference)
def first_round(probe: Any, lines: Any) -> int:
    """The round ``lines[0]`` carries, through the one-element ``uint32`` device array ``probe``: what a writer
    polls in each peer's presence line before it reuses its own lines, and a reader in a writer's last line."""
    launch_1d(ll_rounds_kernel, 1, probe, lines[:1])
    return int(memory.to_host(probe)[0])


def store(lines: Any, words: Any, round_: int) -> None:
    """Write ``words`` (``uint32``) as the lines of round ``round_``: ``lines[i] = round_ << 32 | words[i]``."""
    _same_count(lines, words)
    store_lines(lines, words, flag_of(round_))


def load(words: Any, lines: Any, round_: int, missing: Any = None) -> int:
    """Copy the data half of ``lines`` into ``words``; return how many lines do not yet carry round ``round_``.

    ``missing`` is a one-element ``int32`` device array to count in (one is made when not given); on a GPU the
    count comes back to the host, which is the poll.
    """
    _same_count(lines, words)
    return load_lines(words, lines, flag_of(round_), memory.zeros(1, np.int32) if missing is None else missing)


def rounds_of(lines: Any) -> Any:
    """The round each line carries, as a new ``uint32`` device array: ``for i: out[i] = lines[i] >> 32``."""
    if lines.dtype != np.uint64 or lines.ndim != 1:
        raise ValueError(f"lines: expected a 1-D array of uint64 lines, got {lines.ndim}-D {lines.dtype}")
    out = memory.empty(lines.size, np.uint32)
    load_rounds(out, lines)
    return out


def _same_count(lines: Any, words: Any) -> None:
    if lines.dtype != np.uint64 or words.dtype != np.uint32 or lines.size != words.size:
        raise ValueError(
            f"lines, words: expected uint64 lines and as many uint32 words, got {lines.size} x {lines.dtype} "
            f"and {words.size} x {words.dtype}"
        )
