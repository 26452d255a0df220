"""The plan of one checked collective call: a function of the call, the settings and where the peers are.

:func:`plan_call` turns a call (its name, algorithm, buffers, op) into a
:class:`~nbcoll.comm.collective_op.CollectiveOp`: it binds the context every algorithm reads
(:class:`~nbcoll.comm.algorithms.common.Context`: rank, chunk size, op, avg's division, the links to the peers),
cuts the call into channels (:func:`~nbcoll.comm.algorithms.channels_for`), makes one run of the algorithm per
channel, and numbers the rounds of a one-shot call now, in issue order. It reads nothing but its arguments: the
communicator's engine decides which path a call takes (:func:`fits_ll`) and hands it the LL buffers or the direct
windows that path uses, already set up, and the plan turns that into the *protocol* of the call's one-shot
primitives (:func:`protocol_for`), the one place where it is chosen: the algorithms speak the same primitive
names whatever it is (:mod:`nbcoll.comm.protocol_simple`).

Example::

    call = Call(seq=3, name="all_reduce", algo="ring", dtype=np.dtype(np.float32), args=(x, x), nbytes=x.nbytes,
                single=[(x, x)], op="sum")
    coll = plan_call(call, comm.config, Links(comm.rank, comm.size, comm.send_connection, comm.recv_connection,
                                             comm.peer_counters), record, tracer)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcoll.comm import algorithms, tuner
from nbcoll.comm.algorithms.common import Context, single_rank
from nbcoll.comm.collective_op import CollectiveOp
from nbcoll.comm.protocol_direct import DirectProtocol
from nbcoll.comm.protocol_ll import LLProtocol
from nbcoll.comm.protocol_simple import OneShot, SimpleProtocol
from nbcoll.kernels import combine as combine_kernels


@dataclass(frozen=True)
class Call:
    """One checked collective call, as the plan needs it: ``args`` are what the algorithm takes after its context
    (the checked buffers, and the root); ``single``, the (input, output) pairs a communicator of one rank copies."""

    seq: int
    name: str
    algo: str
    dtype: np.dtype
    args: tuple[Any, ...]
    nbytes: int
    single: list[tuple[Any, Any]]
    op: Any = None


@dataclass(frozen=True)
class Links:
    """Where the peers are: this rank among ``nranks``, its connections per peer and channel, its counters, and
    the memory a one-shot call reads in place (``windows``, ``ll``: ``None`` when the call goes through FIFOs);
    ``copies``: a copy policy (:mod:`nbcoll.comm.copy_policy`), where a CPU fast path streams some copies."""

    rank: int
    nranks: int
    send_connection: Callable[..., Any]
    recv_connection: Callable[..., Any]
    counters: Callable[[int], Any]
    windows: Any = None
    ll: Any = None
    copies: Any = None


def fits_ll(name: str, nbytes: int, nranks: int, ll_bytes: int) -> bool:
    """Whether a direct ``name`` of ``nbytes`` per rank fits one LL buffer of ``ll_bytes`` (``NBCOLL_LL_BYTES``).

    All-to-all and reduce-scatter write one segment per peer, each padded to whole 4-byte words.

    >>> fits_ll("all_reduce", 1000, 4, 1 << 16), fits_ll("all_to_all", 1 << 15, 4, 1 << 16), fits_ll("reduce", 8, 2, 64)
    (True, False, False)
    """
    if name not in tuner.ONE_SHOT:
        return False
    segments = nranks if name in ("all_to_all", "reduce_scatter") else 1
    return 0 < segments * -(-nbytes // 4) * 4 <= ll_bytes


def protocol_for(links: Links) -> type[OneShot]:
    """The protocol that carries a one-shot call's primitives, chosen once, here: LL lines when the engine handed
    the LL buffers (a small message), else the windows, else FIFOs (:mod:`nbcoll.comm.protocol_simple`).

    >>> protocol_for(Links(0, 2, None, None, None)).__name__
    'SimpleProtocol'
    """
    if links.ll is not None:
        return LLProtocol
    return DirectProtocol if links.windows is not None else SimpleProtocol


def plan_call(call: Call, config: Any, links: Links, record: Any, tracer: Any) -> CollectiveOp:
    """The operation of ``call`` on this rank: its contexts, one run of the algorithm per channel, its steps."""
    post = None
    if call.op is not None and combine_kernels.parse_op(call.op) == "avg":
        nranks = links.nranks
        post = lambda value: combine_kernels.divide_in_place(value, nranks)  # noqa: E731 - unchecked, per chunk
    ctx = Context(
        rank=links.rank,
        nranks=links.nranks,
        chunk_elems=max(1, config.chunk_bytes // call.dtype.itemsize),
        fifo_steps=config.steps,
        op=call.op,
        post=post,
        send_connection=links.send_connection,
        recv_connection=links.recv_connection,
        counters=links.counters,
        windows=links.windows,
        ll=links.ll,
        call=f"{call.name} ({call.algo})",
        copies=links.copies,
        protocol=protocol_for(links),
    )
    if links.nranks == 1:
        channels = [single_rank(ctx, call.single)]
    else:  # one run of the algorithm per channel, each on its part of the buffer (NCCL's channels)
        run = algorithms.ALGORITHMS[call.name][call.algo]
        if call.algo == "direct" and not ctx.protocol.per_peer_blocks:  # no one-shot form of it through FIFOs
            run = algorithms.direct.THROUGH_FIFOS.get(call.name, run)
        count = call.nbytes // call.dtype.itemsize
        nch = algorithms.channels_for(call.name, call.algo, count, ctx.chunk_elems, config.nchannels, links.nranks)
        contexts = [ctx] if nch == 1 else [dataclasses.replace(ctx, channel=c, nchannels=nch) for c in range(nch)]
        channels = [run(channel_ctx, *call.args) for channel_ctx in contexts]
    steps = None
    if (links.ll is not None or links.windows is not None) and len(channels) == 1:  # one-shot rounds, numbered now:
        steps = list(channels[0])  # the steps are known now, and can be replayed
        channels = [iter(steps)]
    coll = CollectiveOp(call.name, call.algo, channels, record, tracer, call.seq)
    coll.replayable = steps
    return coll
