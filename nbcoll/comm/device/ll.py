"""NCCL's LL protocol (``src/device/prims_ll.h``) as Numba CUDA device functions: the data carry their own flag.

The simple protocol (:mod:`.prims`) announces a chunk with a counter written after it, behind a fence, and its
reader spins on that counter before it reads the chunk. An LL *line* is 8 bytes: 4 bytes of data and a 4-byte
flag, the step's flag value (here the round number of the call, :func:`nbcoll.kernels.ll.wrapped`), written
together in ONE 64-bit store and read together in one 64-bit load. A reader that sees the flag it waits for has
the data of that very store, whatever order other stores reached memory in: no fence, no counter, and every
thread polls its own lines, so no thread of a rank waits for another. Flags only grow from call to call, so a line
is never cleared: a line still holding an older flag is simply not there yet. The format is the host LL's
(:mod:`nbcoll.kernels.ll`)::

    line = flag << 32 | word              high half: the flag; low half: 4 bytes of data
    ll_store:       lines[i] = line       one st.volatile.global.u64
    ll_load_until:  while (line = lines[i]) >> 32 != flag: spin; every spins_before_check spins: abort?
                    word = line & 0xFFFFFFFF

Data are moved as their bits, never converted: :func:`pack_words` and :func:`unpack_words` read and write a value
through a two-word scratch box viewed as the value's type, which the compiler turns into plain bit casts. A 4-byte
value is one line; an 8-byte one is two lines, its low word first (the host LL's byte order on a little-endian
machine, where a ``uint32`` view of the data gives the words)::

    box = cuda.local.array(2, uint32); typed = box.view(local.dtype)      in the kernel, once
    lo, hi = pack_words(typed, box, x)                                     x's bits as two words (hi 0: 4 bytes)
    x = unpack_words(typed, box, lo, hi)

What the functions are in NCCL:

======================= ==================================================================================
``ll_store``            ``storeLL``: ``st.volatile.global.v4.u32`` of data1/flag1/data2/flag2 (here one
                        8-byte line, ``st.volatile.global.u64``, through :func:`.prims.store_volatile`)
``ll_load_until``       ``readLL``: ``ld.volatile.global`` until the flags match, checking the abort word
                        every ``NCCL_SPINS_BEFORE_CHECK_ABORT`` spins (:func:`.prims.load_volatile`)
``pack_words``          the data half of ``storeLL`` (NCCL reinterprets through a union)
``unpack_words``        the data half of ``readLL``
======================= ==================================================================================

On the simulator the same functions use :mod:`.prims`'s plain leaves: a load or store of one ``uint64`` element
is one access there, so a reader sees a line's two halves together as it does on a GPU.

Example (NumPy: the lines a rank writes for its values, as the kernels write them)::

    >>> import numpy as np
    >>> [hex(line) for line in lines_reference(np.array([1.0, -2.0], np.float32), flag=5).tolist()]
    ['0x53f800000', '0x5c0000000']
"""

from __future__ import annotations

import numpy as np
from numba import cuda, uint32, uint64

from nbcoll.comm.device import prims as dp
from nbcoll.kernels.ll import MAX_ROUND

_SHIFT = np.uint64(32)  # the flag's place in a line (a uint64: Numba takes uint64 mixed with int64 to float64)
_LOW = np.uint64(0xFFFFFFFF)


def lines_reference(values: np.ndarray, flag: int) -> np.ndarray:
    """The lines one rank writes for ``values`` in the round whose flag is ``flag``: ``flag << 32 | word`` for each
    32-bit word of the values' bytes (two lines for an 8-byte value, its low word first).

    >>> lines_reference(np.array([-1], np.int32), flag=2**31).tolist() == [(2**31 << 32) | 0xFFFFFFFF]
    True
    >>> lines_reference(np.array([1.5]), flag=1).tolist()        # float64: two lines, low word first
    [4294967296, 5368184832]
    """
    if not 1 <= flag <= MAX_ROUND:
        raise ValueError(f"flag: expected a 32-bit round flag in [1, {MAX_ROUND}], got {flag}")
    words = np.ascontiguousarray(values).reshape(-1).view("<u4")
    return (np.uint64(flag) << _SHIFT) | words.astype(np.uint64)


# -- a line: one 64-bit word of flag and data ---------------------------------------------------------------


@cuda.jit(device=True)
def line_of(word, flag):
    # One thread: the line that carries `word` in the round of `flag` (both made unsigned 64-bit first).
    return (uint64(flag) << _SHIFT) | (uint64(word) & _LOW)


@cuda.jit(device=True)
def line_flag(line):
    # One thread: the flag half of a line.
    return uint32(line >> _SHIFT)


@cuda.jit(device=True)
def line_word(line):
    # One thread: the data half of a line.
    return uint32(line & _LOW)


@cuda.jit(device=True)
def ll_store(lines, i, data_word, flag):
    # One thread: lines[i] = flag << 32 | data_word, in ONE 64-bit store, so no reader sees the flag without the data.
    dp.store_volatile(lines, i, line_of(data_word, flag))


@cuda.jit(device=True)
def ll_load_until(lines, i, flag, abort, spins_before_check):
    """One thread: spin until line ``i`` carries ``flag``; return ``(True, its data word)``, or ``(False, 0)`` once
    the abort word is set (read every ``spins_before_check`` spins).

    ``while (line = load_volatile(lines[i])) >> 32 != flag: every spins_before_check spins: if abort[0]: fail``
    """
    spins = 0
    while True:
        line = dp.load_volatile(lines, i)  # flag and data in one load: the data are those of the flag's store
        if line_flag(line) == flag:
            return True, line_word(line)
        dp.spin_pause()
        spins += 1
        if spins >= spins_before_check:
            if dp.load_volatile(abort, 0) != 0:
                return False, uint32(0)
            spins = 0


# -- data as words: bit casts through a two-word box ---------------------------------------------------------


@cuda.jit(device=True)
def pack_words(typed, box, x):
    # One thread: x's bits as (low word, high word); `typed` is `box` viewed as x's type; high is 0 for 4 bytes.
    box[1] = uint32(0)
    typed[0] = x
    return box[0], box[1]


@cuda.jit(device=True)
def unpack_words(typed, box, lo, hi):
    # One thread: the value whose bits are (lo, hi) (hi unused for a 4-byte type), no arithmetic conversion.
    box[0] = uint32(lo)
    box[1] = uint32(hi)
    return typed[0]


@cuda.jit(device=True)
def ll_store_value(lines, at, lines_per_value, typed, box, x, flag):
    # One thread: x as 1 or 2 lines from lines[at], each one 64-bit store.
    lo, hi = pack_words(typed, box, x)
    ll_store(lines, at, lo, flag)
    if lines_per_value == 2:
        ll_store(lines, at + 1, hi, flag)


@cuda.jit(device=True)
def ll_load_value(lines, at, lines_per_value, typed, box, flag, abort, spins_before_check):
    # One thread: (True, the value of the 1 or 2 lines from lines[at]) once each carries flag; (False, _) on abort.
    ok, lo = ll_load_until(lines, at, flag, abort, spins_before_check)
    hi = uint32(0)
    if ok and lines_per_value == 2:
        ok, hi = ll_load_until(lines, at + 1, flag, abort, spins_before_check)
    return ok, unpack_words(typed, box, lo, hi)
