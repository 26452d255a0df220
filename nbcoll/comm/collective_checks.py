"""The argument checks of the collectives: each argument is checked once, at the call, and named when it fails.

Every collective method of :class:`~nbcoll.comm.collectives.Collectives` checks its buffers, its root and its op
with these helpers before a byte moves; the steps that run later check nothing again. A failed check raises a
``ValueError`` or ``TypeError`` whose message starts with the argument's name (``recvbuf: expected 8 elements
(2 x sendbuf.size), got 6``), and the call is a *refusal* that every peer learns of (:mod:`nbcoll.comm.refusal`).

Example::

    send = comm._buffer(sendbuf, "sendbuf")                          # a contiguous 1-D device array, or raises
    comm._same_size(recv, "recvbuf", send, "sendbuf", send.size)     # same dtype and the expected count
    comm._same_or_apart(send, recv)                                  # in place, or not overlapping at all
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import combine as combine_kernels
from nbcoll.kernels import copy as copy_kernels


def _nbytes(x: Any) -> int:
    return int(x.size) * x.dtype.itemsize


_address_range = memory.address_range


_OVERLAP = (
    "sendbuf, recvbuf: the buffers overlap but are not the in-place layout this collective allows "
    "(the same buffer, or this rank's block of the larger one)"
)


@functools.cache
def _dtype_name(dtype: np.dtype) -> str:
    """``str(dtype)``, remembered: NumPy builds the name in Python on every call."""
    return str(dtype)


class CollectiveChecks:
    """The checks every collective method shares (a mixin of the communicator; ``self.size`` is its rank count).

    Example::

        blocks = comm._root_blocks(recvbuf, "recvbuf", "gather", root, send, "sendbuf")
    """

    def _buffer(self, buf: Any, arg: str) -> Any:
        if buf is None:
            raise ValueError(f"{arg}: a buffer is required here")
        buf = memory.as_device_array(buf, arg)
        memory.check_dtype(buf.dtype, f"{arg}.dtype")
        memory.require_contiguous(buf, arg)
        return buf.reshape(buf.size) if buf.ndim != 1 else buf

    def _root(self, root: Any) -> int:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
            raise TypeError(f"root: expected an int rank, got {type(root).__name__}")
        if not 0 <= root < self.size:
            raise ValueError(f"root: rank {root} is out of range for a communicator of {self.size} ranks")
        return int(root)

    @staticmethod
    def _same_size(a: Any, a_arg: str, b: Any, b_arg: str, expected: int, expected_text: str | None = None) -> None:
        if a.dtype != b.dtype:
            raise TypeError(f"{a_arg}, {b_arg}: dtypes must match, got {a.dtype} and {b.dtype}")
        if a.size != expected:
            what = expected_text or f"{b_arg}.size"
            raise ValueError(f"{a_arg}: expected {expected} elements ({what}), got {a.size}")

    def _root_blocks(self, buf: Any, arg: str, name: str, root: int, block: Any, block_arg: str) -> Any:
        """The root's buffer of one block per rank (gather's ``recvbuf``, scatter's ``sendbuf``), checked: its size
        is ``size x block.size``, and ``block`` may only be its own slot (in place), not overlap it elsewhere."""
        count = block.size
        if buf is None:
            raise ValueError(f"{arg}: the root (rank {root}) of {name} needs a buffer of {self.size} x {count}")
        blocks = self._buffer(buf, arg)
        self._same_size(blocks, arg, block, block_arg, count * self.size, f"{self.size} x {block_arg}.size")
        own = blocks[root * count : (root + 1) * count]
        self._no_overlap(block, blocks, allowed=_address_range(block) == _address_range(own))
        return blocks

    @staticmethod
    def _no_overlap(send: Any, recv: Any, allowed: bool) -> None:
        if allowed or send.size == 0 or recv.size == 0:
            return
        (s0, s1), (r0, r1) = _address_range(send), _address_range(recv)
        if s0 < r1 and r0 < s1:
            raise ValueError(_OVERLAP)

    @staticmethod
    def _same_or_apart(send: Any, recv: Any) -> None:
        """In place (``recv`` is ``send``, or the same bytes) or apart; each address range is read once."""
        if recv is send or send.size == 0 or recv.size == 0:
            return
        (s0, s1), (r0, r1) = _address_range(send), _address_range(recv)
        if (s0, s1) != (r0, r1) and s0 < r1 and r0 < s1:
            raise ValueError(_OVERLAP)

    def _contribution(self, send: Any, op: Any) -> Any:
        """This rank's input to a reduction: ``sendbuf``, or a pre-multiplied copy of it for premul_sum."""
        if not isinstance(op, combine_kernels.PremulSum) or send.size == 0:
            return send
        scratch = memory.empty(send.size, send.dtype)
        copy_kernels.copy(scratch, send)
        combine_kernels.premul(scratch, op.scalar)
        return scratch
