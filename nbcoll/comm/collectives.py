"""NCCL's collectives as methods of the communicator: argument checks, the choice of algorithm, and running it.

Each method checks every argument before a byte moves, picks an algorithm (``algo=``, ``NBCOLL_ALGO``, or the
tuner's cheapest), builds this rank's program of primitives with it, and runs the program through the same
progress loop as point-to-point operations (timeouts, abort, flight recorder)::

    all_reduce     recvbuf = op(sendbuf of every rank)                       ring, tree, direct, halving_doubling
    broadcast      recvbuf = sendbuf of root                                 ring, tree
    reduce         recvbuf (root) = op(sendbuf of every rank)                ring, tree
    all_gather     recvbuf[r*count:(r+1)*count] = sendbuf of rank r          ring, direct
    reduce_scatter recvbuf = op over ranks of sendbuf[rank*count:...]        ring
    all_to_all     recvbuf[p*count:...] = sendbuf[rank*count:...] of rank p  pairwise
    gather         recvbuf (root)[r*count:...] = sendbuf of rank r           direct
    scatter        recvbuf = sendbuf (root)[rank*count:...]                  direct

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

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nbcoll import backend, memory
from nbcoll.comm import algorithms, tuner
from nbcoll.comm.algorithms.common import Context
from nbcoll.comm.check import Signature, compare_across_ranks
from nbcoll.comm.collective_op import CollectiveOp
from nbcoll.comm.errors import CommError
from nbcoll.comm.primitives import Primitive
from nbcoll.comm.refusal import numbered
from nbcoll.comm.trace import Tracer
from nbcoll.comm.window import DirectWindows
from nbcoll.comm.work import Work
from nbcoll.kernels import combine as combine_kernels
from nbcoll.kernels import copy as copy_kernels

premul_sum = combine_kernels.premul_sum


def _nbytes(x: Any) -> int:
    return int(x.size) * x.dtype.itemsize


_address_range = memory.address_range


class Collectives:
    """The collective operations of :class:`~nbcoll.comm.communicator.Communicator` (a mixin).

    Example::

        comm = nbcoll.init()
        x = nbcoll.to_device(np.full(8, comm.rank, np.int32))
        comm.all_reduce(x)                   # every rank: 0 + 1 + ... + (n-1)
        comm.barrier()
    """

    # -- the public collectives ---------------------------------------------------------------------------------

    @numbered
    def all_reduce(
        self, sendbuf: Any, recvbuf: Any = None, op: Any = "sum", algo: str | None = None, async_op: bool = False
    ) -> Any:
        """``for i: recvbuf[i] = op(sendbuf[i] of rank 0, ..., of rank n-1)``, on every rank."""
        op = combine_kernels.parse_op(op)
        send = self._buffer(sendbuf, "sendbuf")
        recv = send if recvbuf is None else self._buffer(recvbuf, "recvbuf")
        self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
        self._no_overlap(send, recv, allowed=recvbuf is None or _address_range(send) == _address_range(recv))
        memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
        local = self._contribution(send, op)
        return self._collective(
            "all_reduce",
            algo,
            async_op,
            Signature("all_reduce", send.size, str(send.dtype), str(op), -1),
            lambda run, ctx: run(ctx, local, recv),
            result=recvbuf if recvbuf is not None else sendbuf,
            nbytes=_nbytes(send),
            op=op,
            single=[(local, recv)],
        )

    @numbered
    def broadcast(
        self, sendbuf: Any, recvbuf: Any = None, root: int = 0, algo: str | None = None, async_op: bool = False
    ) -> Any:
        """``recvbuf = sendbuf of root`` on every rank (``sendbuf`` is only read on the root)."""
        root = self._root(root)
        send = self._buffer(sendbuf, "sendbuf")
        recv = send if recvbuf is None else self._buffer(recvbuf, "recvbuf")
        self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
        self._no_overlap(send, recv, allowed=recvbuf is None or _address_range(send) == _address_range(recv))
        memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
        return self._collective(
            "broadcast",
            algo,
            async_op,
            Signature("broadcast", recv.size, str(recv.dtype), "-", root),
            lambda run, ctx: run(ctx, send, recv, root),
            result=recvbuf if recvbuf is not None else sendbuf,
            nbytes=_nbytes(recv),
            single=[(send, recv)],
        )

    @numbered
    def reduce(
        self,
        sendbuf: Any,
        recvbuf: Any = None,
        op: Any = "sum",
        root: int = 0,
        algo: str | None = None,
        async_op: bool = False,
    ) -> Any:
        """``recvbuf = op(sendbuf of every rank)`` on ``root``; other ranks' ``recvbuf`` is untouched."""
        op = combine_kernels.parse_op(op)
        root = self._root(root)
        send = self._buffer(sendbuf, "sendbuf")
        recv = send if recvbuf is None else self._buffer(recvbuf, "recvbuf")
        self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
        self._no_overlap(send, recv, allowed=recvbuf is None or _address_range(send) == _address_range(recv))
        if self.rank == root:
            memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
        local = self._contribution(send, op)
        out = recv if self.rank == root else None
        return self._collective(
            "reduce",
            algo,
            async_op,
            Signature("reduce", send.size, str(send.dtype), str(op), root),
            lambda run, ctx: run(ctx, local, out, root),
            result=recvbuf if recvbuf is not None else sendbuf,
            nbytes=_nbytes(send),
            op=op,
            single=[(local, recv)],
        )

    @numbered
    def all_gather(self, sendbuf: Any, recvbuf: Any, algo: str | None = None, async_op: bool = False) -> Any:
        """``recvbuf[r*count:(r+1)*count] = sendbuf of rank r``, with ``count = sendbuf.size``."""
        send, recv = self._buffer(sendbuf, "sendbuf"), self._buffer(recvbuf, "recvbuf")
        count = send.size
        self._same_size(recv, "recvbuf", send, "sendbuf", count * self.size, f"{self.size} x sendbuf.size")
        own = recv[self.rank * count : (self.rank + 1) * count]
        self._no_overlap(send, recv, allowed=_address_range(send) == _address_range(own))
        memory.require_writable(recv, "recvbuf")
        return self._collective(
            "all_gather",
            algo,
            async_op,
            Signature("all_gather", count, str(send.dtype), "-", -1),
            lambda run, ctx: run(ctx, send, recv),
            result=recvbuf,
            nbytes=_nbytes(send),
            single=[(send, recv)],
        )

    @numbered
    def reduce_scatter(
        self, sendbuf: Any, recvbuf: Any, op: Any = "sum", algo: str | None = None, async_op: bool = False
    ) -> Any:
        """``recvbuf = op over ranks of sendbuf[rank*count:(rank+1)*count]``, with ``count = recvbuf.size``."""
        op = combine_kernels.parse_op(op)
        send, recv = self._buffer(sendbuf, "sendbuf"), self._buffer(recvbuf, "recvbuf")
        count = recv.size
        self._same_size(send, "sendbuf", recv, "recvbuf", count * self.size, f"{self.size} x recvbuf.size")
        own = send[self.rank * count : (self.rank + 1) * count]
        self._no_overlap(send, recv, allowed=_address_range(recv) == _address_range(own))
        memory.require_writable(recv, "recvbuf")
        local = self._contribution(send, op)
        return self._collective(
            "reduce_scatter",
            algo,
            async_op,
            Signature("reduce_scatter", count, str(send.dtype), str(op), -1),
            lambda run, ctx: run(ctx, local, recv),
            result=recvbuf,
            nbytes=_nbytes(recv),
            op=op,
            single=[(local, recv)],
        )

    @numbered
    def all_to_all(self, sendbuf: Any, recvbuf: Any, algo: str | None = None, async_op: bool = False) -> Any:
        """``recvbuf[p*count:(p+1)*count] = sendbuf[rank*count:(rank+1)*count] of rank p``."""
        send, recv = self._buffer(sendbuf, "sendbuf"), self._buffer(recvbuf, "recvbuf")
        self._same_size(recv, "recvbuf", send, "sendbuf", send.size)
        if send.size % self.size:
            raise ValueError(f"sendbuf: size {send.size} is not a multiple of the {self.size} ranks")
        self._no_overlap(send, recv, allowed=False)
        memory.require_writable(recv, "recvbuf")
        return self._collective(
            "all_to_all",
            algo,
            async_op,
            Signature("all_to_all", send.size // self.size, str(send.dtype), "-", -1),
            lambda run, ctx: run(ctx, send, recv),
            result=recvbuf,
            nbytes=_nbytes(send) // self.size,
            single=[(send, recv)],
        )

    @numbered
    def gather(
        self, sendbuf: Any, recvbuf: Any = None, root: int = 0, algo: str | None = None, async_op: bool = False
    ) -> Any:
        """On ``root``: ``recvbuf[r*count:(r+1)*count] = sendbuf of rank r``; ``recvbuf`` is ignored elsewhere."""
        root = self._root(root)
        send = self._buffer(sendbuf, "sendbuf")
        count = send.size
        recv = None
        if self.rank == root:
            if recvbuf is None:
                raise ValueError(f"recvbuf: the root (rank {root}) of gather needs a buffer of {self.size} x {count}")
            recv = self._buffer(recvbuf, "recvbuf")
            self._same_size(recv, "recvbuf", send, "sendbuf", count * self.size, f"{self.size} x sendbuf.size")
            own = recv[root * count : (root + 1) * count]
            self._no_overlap(send, recv, allowed=_address_range(send) == _address_range(own))
            memory.require_writable(recv, "recvbuf")
        return self._collective(
            "gather",
            algo,
            async_op,
            Signature("gather", count, str(send.dtype), "-", root),
            lambda run, ctx: run(ctx, send, recv, root),
            result=recvbuf,
            nbytes=_nbytes(send),
            single=[(send, recv)],
        )

    @numbered
    def scatter(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, algo: str | None = None, async_op: bool = False
    ) -> Any:
        """``recvbuf = sendbuf of root [rank*count:(rank+1)*count]``; ``sendbuf`` is ignored off the root."""
        root = self._root(root)
        recv = self._buffer(recvbuf, "recvbuf")
        memory.require_writable(recv, "recvbuf")
        count = recv.size
        send = None
        if self.rank == root:
            if sendbuf is None:
                raise ValueError(f"sendbuf: the root (rank {root}) of scatter needs a buffer of {self.size} x {count}")
            send = self._buffer(sendbuf, "sendbuf")
            self._same_size(send, "sendbuf", recv, "recvbuf", count * self.size, f"{self.size} x recvbuf.size")
            own = send[root * count : (root + 1) * count]
            self._no_overlap(send, recv, allowed=_address_range(recv) == _address_range(own))
        return self._collective(
            "scatter",
            algo,
            async_op,
            Signature("scatter", count, str(recv.dtype), "-", root),
            lambda run, ctx: run(ctx, send, recv, root),
            result=recvbuf,
            nbytes=_nbytes(recv),
            single=[(send, recv)],
        )

    @numbered
    def barrier(self, async_op: bool = False) -> Any:
        """Return only when every rank has called it."""
        token = memory.zeros(1, np.uint8)
        return self._collective(
            "barrier",
            None,
            async_op,
            Signature("barrier", 0, "-", "-", -1),
            lambda run, ctx: run(ctx, token),
            result=None,
            nbytes=0,
            single=[],
        )

    def estimate(self, collective: str, nbytes: int, algo: str | None = None) -> float:
        """Predicted seconds for ``collective`` of ``nbytes`` (per rank's block) on this communicator."""
        if collective not in algorithms.ALGORITHMS:
            raise ValueError(f"collective: unknown {collective!r}; expected one of {', '.join(algorithms.ALGORITHMS)}")
        algo = algo or self._choose(collective, nbytes)
        algorithms.check_algo(collective, algo)
        return tuner.estimate(collective, algo, nbytes, self.size, self.config.chunk_bytes, self._link_model())

    # -- checks -------------------------------------------------------------------------------------------------

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

    @staticmethod
    def _no_overlap(send: Any, recv: Any, allowed: bool) -> None:
        if allowed or send.size == 0 or recv.size == 0:
            return
        (s0, s1), (r0, r1) = _address_range(send), _address_range(recv)
        if s0 < r1 and r0 < s1:
            raise ValueError(
                "sendbuf, recvbuf: the buffers overlap but are not the in-place layout this collective allows "
                "(the same buffer, or this rank's block of the larger one)"
            )

    # -- running ------------------------------------------------------------------------------------------------

    def _contribution(self, send: Any, op: Any) -> Any:
        """This rank's input to a reduction: ``sendbuf``, or a pre-multiplied copy of it for premul_sum."""
        if not isinstance(op, combine_kernels.PremulSum) or send.size == 0:
            return send
        scratch = memory.empty(send.size, send.dtype)
        copy_kernels.copy(scratch, send)
        combine_kernels.premul(scratch, op.scalar)
        return scratch

    def _link_model(self) -> tuner.LinkModel:
        """The slowest link of the whole communicator, with rank 0's calibration: the same on every rank.

        A rank that modelled only its own links would choose differently from a rank with faster ones (ranks
        0-1 sharing a node, rank 2 alone), and the collective would hang with each running another algorithm.
        """
        cache = self.__dict__.setdefault("_link_models", {})
        current = backend.get_backend()
        if current not in cache:
            models = self._wiring.link_models.get(current) or tuner.default_models(current)
            transports = self.topology.transports() or {"ipc"}
            windows = self.config.buffsize if transports == {"ipc"} else 0  # direct reads peers in place
            cache[current] = dataclasses.replace(tuner.slowest(models, transports), window_bytes=windows)
        return cache[current]

    def _allowed(self, collective: str) -> list[str]:
        table = algorithms.parse_algo_setting_cached(os.environ.get("NBCOLL_ALGO"))
        return [a for a in algorithms.ALGORITHMS[collective] if a in table[collective]]

    def _choose(self, collective: str, nbytes: int) -> str:
        allowed = self._allowed(collective)
        if not allowed:
            raise ValueError(
                f"NBCOLL_ALGO: excludes every algorithm of {collective} "
                f"({', '.join(algorithms.ALGORITHMS[collective])})"
            )
        return tuner.choose(collective, allowed, nbytes, self.size, self.config.chunk_bytes, self._link_model())

    def _collective(
        self,
        name: str,
        algo: str | None,
        async_op: bool,
        signature: Signature,
        build: Callable[[Callable, Context], Iterator[Primitive]],
        result: Any,
        nbytes: int,
        single: list[tuple[Any, Any]],
        op: Any = None,
    ) -> Any:
        seq = self._call_seq
        if algo is not None:
            algorithms.check_algo(name, algo)
        else:
            algo = self._choose(name, nbytes)
        if _checking():
            try:
                compare_across_ranks(self._wiring.ctrl, signature, self.config.timeout, self.watchdog.check_aborted)
            except Exception:
                self._refusals.skipped(seq)  # every rank raises here: none runs the call
                raise
        state = self.__dict__.setdefault("_collective_state", {})
        if "tracer" not in state:
            state["tracer"] = Tracer.from_env(self.rank)
        dtype = np.dtype(str(signature.dtype)) if signature.dtype != "-" else np.dtype(np.uint8)
        post = None
        if op is not None and combine_kernels.parse_op(op) == "avg":
            nranks = self.size
            post = lambda value: combine_kernels.divide(value, nranks)  # noqa: E731
        ctx = Context(
            rank=self.rank,
            nranks=self.size,
            chunk_elems=max(1, self.config.chunk_bytes // dtype.itemsize),
            fifo_steps=self.config.steps,
            op=op,
            post=post,
            send_connection=self.send_connection,
            recv_connection=self.recv_connection,
            counters=self.peer_counters,
            windows=self._direct_windows() if algo == "direct" and name in ("all_reduce", "all_gather") else None,
        )
        if self.size == 1:
            steps = _single_rank(name, ctx, single)
        else:
            steps = build(algorithms.ALGORITHMS[name][algo], ctx)
        record = self.recorder.record(name, -1, nbytes, f"{signature} via {algo}")
        self.log.info("COLL", f"{name} #{seq} via {algo}: {signature}")
        coll = CollectiveOp(name, algo, steps, record, state["tracer"], seq)
        work = Work(f"{name} #{seq} ({algo}) on rank {self.rank}", result)
        if self._group.depth:
            self._queue_in_group(coll, work)
            return work if async_op else result
        self._mark_run(seq)
        self._progress.submit([coll], [work], wait=not async_op)
        return work if async_op else result

    def _refuse(self, seq: int, name: str) -> None:
        """This rank refused call ``seq``: make sure its peers learn it (see :mod:`nbcoll.comm.refusal`)."""
        if not _checking():
            self._refusals.refuse(seq, name)
            return
        try:  # the refusal takes this call's place in the exchange, so every rank raises together
            compare_across_ranks(
                self._wiring.ctrl, Signature.refusal(name), self.config.timeout, self.watchdog.check_aborted
            )
        finally:
            self._refusals.skipped(seq)

    def _direct_windows(self) -> DirectWindows | None:
        """The direct windows, made at the first one-shot collective; ``None`` unless every peer is on ipc.

        Making them is collective, like the one-shot collective that asks for them: every rank gets here.
        """
        state = self.__dict__.setdefault("_collective_state", {"seq": 0})
        if "windows" not in state:
            if "windows_failed" in state:
                raise CommError(
                    f"rank {self.rank}: the direct windows of this communicator could not be set up earlier "
                    f"({state['windows_failed']}); abort or shrink the communicator"
                )
            local = self.size > 1 and all(self.transport_to(p) == "ipc" for p in range(self.size) if p != self.rank)
            if not local:
                state["windows"] = None
                return None
            try:
                state["windows"] = DirectWindows(
                    self._wiring.ctrl, self.config.buffsize, self.watchdog.drive, self.recorder, self._wiring.uid
                )
            except BaseException as exc:
                state["windows_failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                raise
        return state["windows"]

    def _close_collectives(self) -> None:
        """Release what the collectives hold (the direct windows, the trace file); the communicator calls this."""
        state = self.__dict__.get("_collective_state", {})
        if state.get("windows") is not None:
            state["windows"].close()
        if state.get("tracer") is not None:
            state["tracer"].close()

    def _queue_in_group(self, coll: CollectiveOp, work: Work) -> None:
        queued = self._group.queued
        if any(not isinstance(op, CollectiveOp) for op in queued):
            raise ValueError(
                "comm.group(): this group already holds point-to-point operations; put collectives and "
                "send/recv in separate groups"
            )
        if queued:
            queued[-1].fuse(coll)  # one operation: the collectives run in the order they were issued
        else:
            queued.append(coll)
        self._group.works.append(work)


def _checking() -> bool:
    """``NBCOLL_CHECK=1``: compare every call's signature across ranks first (:mod:`nbcoll.comm.check`)."""
    return os.environ.get("NBCOLL_CHECK", "0").strip() == "1"


def _single_rank(name: str, ctx: Context, pairs: list[tuple[Any, Any]]) -> Iterator[Primitive]:
    """One rank: every collective is a local copy (and avg's division by one, which changes nothing)."""
    for src, dst in pairs:
        if src is None or dst is None or src.size == 0:
            continue
        same = _address_range(src) == _address_range(dst)
        if not same:
            yield ctx.copy(src, dst, (0, int(dst.size)))
