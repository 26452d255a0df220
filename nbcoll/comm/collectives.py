"""NCCL's collectives as methods of the communicator: argument checks, the choice of algorithm, and running it.

Each method checks every argument once, before a byte moves; the communicator's engine
(:mod:`nbcoll.comm.engine`) then picks an algorithm (``algo=``, ``NBCOLL_ALGO``, or the tuner's cheapest) and binds
this rank's program of primitives with it, and the program runs through the same progress queue as
point-to-point operations (timeouts, abort, flight recorder)::

    all_reduce     recvbuf = op(sendbuf of every rank)                       ring, tree, direct, halving_doubling
    broadcast      recvbuf = sendbuf of root                                 ring, tree, direct
    reduce         recvbuf (root) = op(sendbuf of every rank)                ring, tree
    all_gather     recvbuf[r*count:(r+1)*count] = sendbuf of rank r          ring, direct
    reduce_scatter recvbuf = op over ranks of sendbuf[rank*count:...]        ring, direct
    all_to_all     recvbuf[p*count:...] = sendbuf[rank*count:...] of rank p  pairwise, direct

This module holds the reductions (all-reduce, reduce, reduce-scatter), :mod:`nbcoll.comm.copy_collectives` the
collectives that only copy (broadcast, all-gather, all-to-all, and the barrier); ``_launch``, here, runs the checked
call of either. Gather and scatter, which NCCL leaves to grouped sends
and receives, are in :mod:`nbcoll.comm.gather_scatter`.

Buffers are contiguous device arrays of one dtype; ``count`` is the number of elements of the per-rank block.
``recvbuf=None`` means in place, where NCCL allows it: all-reduce, broadcast and reduce reuse ``sendbuf``;
all-gather (reduce-scatter) is in place when ``sendbuf`` (``recvbuf``) is this rank's block of the other.

Example::

    comm.all_reduce(grads, op="avg")                     # in place
    comm.all_gather(shard, full)
    work = comm.reduce_scatter(full, shard, async_op=True)
    work.wait()
"""

from __future__ import annotations

from typing import Any

from nbcoll import memory
from nbcoll.comm.check import Signature
from nbcoll.comm.collective_checks import _address_range, _dtype_name, _nbytes
from nbcoll.comm.copy_collectives import CopyCollectives
from nbcoll.comm.work import Work
from nbcoll.kernels import combine as combine_kernels

premul_sum = combine_kernels.premul_sum


class Collectives(CopyCollectives):
    """The collective operations of :class:`~nbcoll.comm.communicator.Communicator` (a mixin): the reductions here,
    the copies in :class:`~nbcoll.comm.copy_collectives.CopyCollectives`.

    Example::

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x = nbcoll.to_device(np.full(8, comm.rank, np.int32))
        >>> _ = comm.all_reduce(x)                 # every rank: 0 + 1 + ... + (n-1)
        >>> comm.barrier()
        >>> comm.destroy()
    """

    # -- the public collectives ---------------------------------------------------------------------------------

    def all_reduce(
        self,
        sendbuf: Any,
        recvbuf: Any = None,
        op: Any = "sum",
        algo: str | None = None,
        async_op: bool = False,
        proto: str | None = None,
    ) -> Any:
        """``for i: recvbuf[i] = op(sendbuf[i] of rank 0, ..., of rank n-1)``, on every rank.

        ``proto="device"`` (or ``NBCOLL_PROTO=device``) runs the ring as one kernel per rank
        (:mod:`nbcoll.comm.device_collective`); ``"host"`` steers every chunk from Python, the default.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()                   # under mpiexec -n 4 the sums are 4 times larger
        >>> x = nbcoll.to_device(np.array([1.0, 2.0], np.float32))
        >>> nbcoll.to_host(comm.all_reduce(x))     # in place: recvbuf defaults to sendbuf
        array([1., 2.], dtype=float32)
        >>> y = nbcoll.zeros(2)
        >>> nbcoll.to_host(comm.all_reduce(x, y, op="max"))
        array([1., 2.], dtype=float32)
        >>> work = comm.all_reduce(x, async_op=True)   # returns at once; wait() before reading x
        >>> work.wait()                                # then gives the result
        array([1., 2.], dtype=float32)
        >>> comm.destroy()
        """
        ran, result = self._on_device("all_reduce", proto, sendbuf, recvbuf, op, -1, algo, async_op)
        if ran:
            return result
        with self.engine.call("all_reduce") as seq:
            op = combine_kernels.parse_op(op)
            send = self._buffer(sendbuf, "sendbuf")
            recv = send if recvbuf is None else self._buffer(recvbuf, "recvbuf")
            self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
            self._same_or_apart(send, recv)
            memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
            local = self._contribution(send, op)
            return self._launch(
                seq,
                "all_reduce",
                algo,
                async_op,
                Signature("all_reduce", send.size, _dtype_name(send.dtype), str(op), -1),
                (local, recv),
                result=recvbuf if recvbuf is not None else sendbuf,
                nbytes=_nbytes(send),
                op=op,
                single=[(local, recv)],
            )

    def reduce(
        self,
        sendbuf: Any,
        recvbuf: Any = None,
        op: Any = "sum",
        root: int = 0,
        algo: str | None = None,
        async_op: bool = False,
        proto: str | None = None,
    ) -> Any:
        """``recvbuf = op(sendbuf of every rank)`` on ``root``; other ranks' ``recvbuf`` is untouched; ``proto`` as
        for :meth:`all_reduce`.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> x, total = nbcoll.to_device(np.array([1, 2], np.int64)), nbcoll.zeros(2, np.int64)
        >>> _ = comm.reduce(x, total, op="sum", root=0)
        >>> nbcoll.to_host(total)                              # on rank 0: the sum over the ranks
        array([1, 2])
        >>> comm.destroy()
        """
        ran, result = self._on_device("reduce", proto, sendbuf, recvbuf, op, root, algo, async_op)
        if ran:
            return result
        with self.engine.call("reduce") as seq:
            op = combine_kernels.parse_op(op)
            root = self._root(root)
            send = self._buffer(sendbuf, "sendbuf")
            recv = send if recvbuf is None else self._buffer(recvbuf, "recvbuf")
            self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
            self._same_or_apart(send, recv)
            if self.rank == root:
                memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
            local = self._contribution(send, op)
            out = recv if self.rank == root else None
            return self._launch(
                seq,
                "reduce",
                algo,
                async_op,
                Signature("reduce", send.size, _dtype_name(send.dtype), str(op), root),
                (local, out, root),
                result=recvbuf if recvbuf is not None else sendbuf,
                nbytes=_nbytes(send),
                op=op,
                single=[(local, recv)],
            )

    def reduce_scatter(
        self,
        sendbuf: Any,
        recvbuf: Any,
        op: Any = "sum",
        algo: str | None = None,
        async_op: bool = False,
        proto: str | None = None,
    ) -> Any:
        """``recvbuf = op over ranks of sendbuf[rank*count:(rank+1)*count]``, with ``count = recvbuf.size``;
        ``proto`` as for :meth:`all_reduce`.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> blocks = nbcoll.to_device(np.arange(3 * comm.size, dtype=np.float32))   # one block of 3 per rank
        >>> mine = nbcoll.zeros(3)
        >>> nbcoll.to_host(comm.reduce_scatter(blocks, mine))          # block `rank`, summed over the ranks
        array([0., 1., 2.], dtype=float32)
        >>> comm.destroy()
        """
        ran, result = self._on_device("reduce_scatter", proto, sendbuf, recvbuf, op, -1, algo, async_op)
        if ran:
            return result
        with self.engine.call("reduce_scatter") as seq:
            op = combine_kernels.parse_op(op)
            send, recv = self._buffer(sendbuf, "sendbuf"), self._buffer(recvbuf, "recvbuf")
            count = recv.size
            self._same_size(send, "sendbuf", recv, "recvbuf", count * self.size, f"{self.size} x recvbuf.size")
            own = send[self.rank * count : (self.rank + 1) * count]
            self._no_overlap(send, recv, allowed=_address_range(recv) == _address_range(own))
            memory.require_writable(recv, "recvbuf")
            local = self._contribution(send, op)
            return self._launch(
                seq,
                "reduce_scatter",
                algo,
                async_op,
                Signature("reduce_scatter", count, _dtype_name(send.dtype), str(op), -1),
                (local, recv),
                result=recvbuf,
                nbytes=_nbytes(recv),
                op=op,
                single=[(local, recv)],
            )

    # -- running a checked call ---------------------------------------------------------------------------------

    def _launch(
        self,
        seq: int,
        name: str,
        algo: str | None,
        async_op: bool,
        signature: Signature,
        args: tuple[Any, ...],
        *,
        result: Any,
        nbytes: int,
        single: list[tuple[Any, Any]],
        op: Any = None,
    ) -> Any:
        """Plan call ``seq`` on the engine, then run it now, in the background, or at the end of the open group.

        ``args`` are what the algorithm takes after its context: the checked buffers (and the root).
        """
        queued = not self._group.depth  # a group's calls are bound now, and run at its end
        coll = self.engine.plan(seq, name, algo, signature, args, nbytes=nbytes, single=single, op=op, queued=queued)
        if not async_op and not self._group.depth:  # the common case: run it now, no handle to make
            self.engine.mark_run(seq)
            self.engine.progress.submit([coll], [], wait=True, checked=True)  # engine.call checked it just now
            return result
        work = Work(f"{coll.headline()} on rank {self.rank}", result)
        if self._group.depth:
            self._group.queue_collective(coll, work)
        else:
            self.engine.mark_run(seq)
            self.engine.progress.submit([coll], [work], wait=False)
        return work if async_op else result
