"""The errors a communicator raises: every one names the operation, the rank and the peer involved.

Example::

    try:
        comm.recv(buf, peer=1)
    except nbcoll.CommTimeoutError as err:
        print(err)          # what rank 0 waited for, the step it reached, and its last operations
"""

from __future__ import annotations


class CommError(RuntimeError):
    """A communication operation failed; the communicator should be aborted or shrunk.

    >>> import numpy as np, nbcoll
    >>> comm = nbcoll.init()
    >>> comm.abort()
    >>> try:
    ...     comm.all_reduce(np.ones(2))
    ... except nbcoll.CommError as error:          # every failure of a communicator is a CommError
    ...     print(type(error).__name__)
    CommAbortedError
    >>> comm.destroy()
    """


class CommTimeoutError(CommError, TimeoutError):
    """A wait made no progress for ``NBCOLL_TIMEOUT`` seconds.

    >>> import nbcoll
    >>> issubclass(nbcoll.CommTimeoutError, nbcoll.CommError), issubclass(nbcoll.CommTimeoutError, TimeoutError)
    (True, True)
    >>> from nbcoll.comm import CommConfig
    >>> CommConfig(timeout=5.0).timeout              # NBCOLL_TIMEOUT=5: waits give up after 5 s of no progress
    5.0
    """


class CommAbortedError(CommError):
    """The communicator was aborted, here or on another rank, by :meth:`Communicator.abort`.

    >>> import numpy as np, nbcoll
    >>> comm = nbcoll.init()
    >>> comm.abort()
    >>> comm.barrier()
    Traceback (most recent call last):
        ...
    nbcoll.comm.errors.CommAbortedError: rank 0: operation refused: the communicator was aborted by this rank; ...
    >>> comm.destroy()
    """


class CommPeerLostError(CommError):
    """A peer process this rank was waiting for has exited.

    >>> import nbcoll
    >>> issubclass(nbcoll.CommPeerLostError, nbcoll.CommError)    # a CommError: shrink the communicator to go on
    True
    """


class CommMismatchError(CommError):
    """A sender and a receiver disagree about a message (its size in bytes).

    >>> import nbcoll
    >>> issubclass(nbcoll.CommMismatchError, nbcoll.CommError)    # raised by the receiver, naming both sizes
    True
    """


class CollectiveMismatchError(CommError):
    """Ranks called different collectives, or the same one with a different count, dtype, op or root.

    >>> import nbcoll
    >>> issubclass(nbcoll.CollectiveMismatchError, nbcoll.CommError)   # with NBCOLL_CHECK=1, before any data moves
    True
    """
