"""One test of the perf tool: a collective's buffers filled with exact inputs, the call, and its ``#wrong`` check.

Example::

    case = build_case(comm, "all_reduce", "ring", "sum", np.dtype("float32"), count=1024, root=0, inplace=False)
    case.call()                       # what is timed
    case.refill()                     # fresh inputs, then
    case.call()
    case.wrong()                      # elements of this rank's result that differ from the exact answer
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.perf import exact

INPLACE_UNSUPPORTED = frozenset({"all_to_all", "sendrecv"})
"""Tests with no in-place form (the table prints N/A there): a buffer cannot be sent and received at once."""


def _upload(dst: Any, host: np.ndarray) -> None:
    if isinstance(dst, np.ndarray):
        dst[...] = host
    else:
        dst.copy_to_device(host)


@dataclass
class Case:
    """The buffers of one test and what to do with them (see :func:`build_case`)."""

    call: Callable[[], Any]
    inputs: list[tuple[Any, np.ndarray]] = field(default_factory=list)
    result: Any = None
    expected: np.ndarray | None = None

    def refill(self) -> None:
        """Put the inputs back: in-place tests overwrite them."""
        for device, host in self.inputs:
            _upload(device, host)

    def wrong(self) -> int:
        """Elements of this rank's result that differ from the exact expected result (0 where none is checked)."""
        if self.expected is None:
            return 0
        return exact.count_wrong(memory.to_host(self.result), self.expected)


def build_case(
    comm: Any, collective: str, algo: str | None, op: str, dtype: np.dtype, count: int, root: int, inplace: bool
) -> Case:
    """Buffers, inputs and expected result of ``collective`` for this rank; ``count`` is the per-rank block."""
    n, r = comm.size, comm.rank
    reduce_op = exact.make_op(op)
    device = memory.to_device

    if collective in ("all_reduce", "reduce"):
        host = exact.rank_input(r, op, dtype, 0, count)
        send = device(host)
        recv = None if inplace else memory.zeros(count, dtype)
        checked = collective == "all_reduce" or r == root
        expected = exact.reduced_values(op, dtype, n, 0, count) if checked else None
        if collective == "all_reduce":
            call = lambda: comm.all_reduce(send, recv, op=reduce_op, algo=algo)  # noqa: E731
        else:
            call = lambda: comm.reduce(send, recv, op=reduce_op, root=root, algo=algo)  # noqa: E731
        return Case(call, [(send, host)], send if inplace else recv, expected)

    if collective == "broadcast":
        host = exact.rank_input(root, op, dtype, 0, count) if r == root else np.zeros(count, dtype)
        send = device(host)
        recv = None if inplace else memory.zeros(count, dtype)
        expected = exact.rank_input(root, op, dtype, 0, count)
        call = lambda: comm.broadcast(send, recv, root=root, algo=algo)  # noqa: E731
        return Case(call, [(send, host)], send if inplace else recv, expected)

    if collective == "all_gather":
        mine = exact.rank_input(r, op, dtype, 0, count)
        expected = np.concatenate([exact.rank_input(p, op, dtype, 0, count) for p in range(n)])
        if inplace:
            start = np.zeros(n * count, dtype)
            start[r * count : (r + 1) * count] = mine
            recv = device(start)
            send = recv[r * count : (r + 1) * count]
            inputs = [(recv, start)]
        else:
            send, recv = device(mine), memory.zeros(n * count, dtype)
            inputs = [(send, mine)]
        call = lambda: comm.all_gather(send, recv, algo=algo)  # noqa: E731
        return Case(call, inputs, recv, expected)

    if collective == "reduce_scatter":
        host = exact.rank_input(r, op, dtype, 0, n * count)
        send = device(host)
        recv = send[r * count : (r + 1) * count] if inplace else memory.zeros(count, dtype)
        expected = exact.reduced_values(op, dtype, n, r * count, count)
        call = lambda: comm.reduce_scatter(send, recv, op=reduce_op, algo=algo)  # noqa: E731
        return Case(call, [(send, host)], recv, expected)

    if collective == "all_to_all":
        host = exact.rank_input(r, op, dtype, 0, n * count)
        send, recv = device(host), memory.zeros(n * count, dtype)
        expected = np.concatenate([exact.rank_input(p, op, dtype, r * count, count) for p in range(n)])
        call = lambda: comm.all_to_all(send, recv, algo=algo)  # noqa: E731
        return Case(call, [(send, host)], recv, expected)

    if collective == "gather":
        mine = exact.rank_input(r, op, dtype, 0, count)
        expected = None
        if r == root:
            expected = np.concatenate([exact.rank_input(p, op, dtype, 0, count) for p in range(n)])
            start = np.zeros(n * count, dtype)
            start[r * count : (r + 1) * count] = mine
            recv = device(start)
            send = recv[r * count : (r + 1) * count] if inplace else device(mine)
            inputs = [(recv, start)] + ([] if inplace else [(send, mine)])
        else:
            recv, send = None, device(mine)
            inputs = [(send, mine)]
        call = lambda: comm.gather(send, recv, root=root, algo=algo)  # noqa: E731
        return Case(call, inputs, recv, expected)

    if collective == "scatter":
        expected = exact.rank_input(root, op, dtype, r * count, count)
        if r == root:
            host = exact.rank_input(root, op, dtype, 0, n * count)
            send = device(host)
            recv = send[r * count : (r + 1) * count] if inplace else memory.zeros(count, dtype)
            inputs = [(send, host)]
        else:
            send, recv, inputs = None, memory.zeros(count, dtype), []
        call = lambda: comm.scatter(send, recv, root=root, algo=algo)  # noqa: E731
        return Case(call, inputs, recv, expected)

    if collective == "sendrecv":
        # Every rank sends to the next and receives from the previous one: a ring of point-to-point transfers.
        host = exact.rank_input(r, op, dtype, 0, count)
        send = device(host)
        recv = memory.zeros(count, dtype)
        expected = exact.rank_input((r - 1) % n, op, dtype, 0, count)

        def call() -> None:
            if n == 1:
                copy_kernels.copy(recv, send)
                return
            with comm.group():
                comm.send(send, (r + 1) % n)
                comm.recv(recv, (r - 1) % n)

        return Case(call, [(send, host)], recv, expected)

    raise ValueError(f"collective: unknown {collective!r}")
