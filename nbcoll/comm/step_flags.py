"""The flags of a step: what one chunk's hop does, as the bits of NCCL's ``genericOp`` (:mod:`nbcoll.comm.primitives`).

A primitive's name is the list of its flags, read left to right: ``recv_reduce_copy_send`` is ``RECV | REDUCE |
COPY | SEND``; ``DIRECT`` reads or writes the peers' buffers in place, and ``POST`` applies the op's last step
(avg's division) to a value final here.

Example::

    >>> from nbcoll.comm.step_flags import COPY, RECV, REDUCE, name_of
    >>> name_of(RECV | REDUCE | COPY)
    'recv_reduce_copy'
"""

from __future__ import annotations

import enum


class Flag(enum.IntFlag):
    """What one step does; a primitive's name is the list of its flags (NCCL's ``genericOp`` arguments)."""

    RECV = 1  # read one chunk from each peer it receives from
    REDUCE = 2  # fold the local input with what arrived
    COPY = 4  # write the step's value into the output
    SEND = 8  # write the step's value into each peer's slot
    DIRECT = 16  # read or write the peers' buffers in place (a window), not FIFO slots
    POST = 32  # the value is final here: apply the op's last step (avg's division)


RECV, REDUCE, COPY, SEND, DIRECT, POST = Flag.RECV, Flag.REDUCE, Flag.COPY, Flag.SEND, Flag.DIRECT, Flag.POST

# The same bits as plain ints, for the tests a step makes while it runs: an operation on a Flag builds an enum
# member (about half a microsecond each), one on an int does not. Every kind of step uses these.
RECV_BIT, REDUCE_BIT, COPY_BIT, SEND_BIT, POST_BIT = int(RECV), int(REDUCE), int(COPY), int(SEND), int(POST)

_NAMES = {
    SEND: "send",
    RECV | COPY: "recv",
    RECV | REDUCE | SEND: "recv_reduce_send",
    RECV | COPY | SEND: "recv_copy_send",
    RECV | REDUCE | COPY: "recv_reduce_copy",
    RECV | REDUCE | COPY | SEND: "recv_reduce_copy_send",
    COPY | SEND: "copy_send",
    COPY: "copy",
}


def name_of(flags: Flag) -> str:
    """The primitive's name: ``RECV | REDUCE | COPY`` is ``recv_reduce_copy``; ``DIRECT`` adds ``direct_``."""
    base = _NAMES.get(flags & ~(DIRECT | POST), "post_op")
    return "direct_" + base if flags & DIRECT else base
