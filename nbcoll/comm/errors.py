"""The errors a communicator raises: every one names the operation, the rank and the peer involved.

Example::

    try:
        comm.recv(buf, peer=1)
    except nbcoll.CommTimeoutError as err:
        print(err)          # what rank 0 waited for, the step it reached, and its last operations
"""

from __future__ import annotations


class CommError(RuntimeError):
    """A communication operation failed; the communicator should be aborted or shrunk."""


class CommTimeoutError(CommError, TimeoutError):
    """A wait made no progress for ``NBCOLL_TIMEOUT`` seconds."""


class CommAbortedError(CommError):
    """The communicator was aborted, here or on another rank, by :meth:`Communicator.abort`."""


class CommPeerLostError(CommError):
    """A peer process this rank was waiting for has exited."""


class CommMismatchError(CommError):
    """A sender and a receiver disagree about a message (its size in bytes)."""


class CollectiveMismatchError(CommError):
    """Ranks called different collectives, or the same one with a different count, dtype, op or root."""
