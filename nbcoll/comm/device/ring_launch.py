"""Launching the one-GPU world's ring all-reduce without waiting for it, and the same kernel with one primitive
swapped for another device function.

:meth:`DeviceRing.launch <nbcoll.comm.algorithms.ring_device.DeviceRing.launch>` makes a status array, launches
and copies the status back: one call, one synchronization. A benchmark wants calls back to back on the stream,
with the status read once at the end, and an exercise wants the ring's schedule with the learner's
``recv_reduce_send`` in it. Both launch the landed kernel's body on the ring's own FIFOs and counters::

    status = new_status(ring)
    for _ in range(iters):
        enqueue(ring, d_local, d_out, status)          # no synchronization between calls
    raise_for_status(status.copy_to_host())

    kernel = ring_kernel_with(my_recv_reduce_send)     # the schedule of ring_device, one primitive replaced
    enqueue(ring, d_local, d_out, status, kernel=kernel)
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
from numba import cuda

from nbcoll.comm.algorithms import ring_device as rd
from nbcoll.comm.device import prims as dp


def new_status(ring: rd.DeviceRing) -> Any:
    """A device status array for ``ring``, ``[channel, rank] = (code, steps started)``, every rank RUNNING.

    >>> ring = rd.DeviceRing(2, slot_elems=4)
    >>> new_status(ring).copy_to_host()[0].tolist()
    [[-1, -1], [-1, -1]]
    """
    return cuda.to_device(np.full((ring.nchannels, ring.nranks, 2), dp.RUNNING, np.int64))


def enqueue(
    ring: rd.DeviceRing,
    local: Any,
    out: Any,
    status: Any,
    op: str = "sum",
    spins_before_check: int = dp.SPINS_BEFORE_CHECK_ABORT,
    kernel: Any = None,
) -> None:
    """Launch ``kernel`` (the ring all-reduce by default) on device arrays ``local`` and ``out`` with ``ring``'s
    FIFO, counters and abort word, writing ``status``; on a GPU it returns before the kernel ends. The arguments
    are those :meth:`DeviceRing.launch <nbcoll.comm.algorithms.ring_device.DeviceRing.launch>` checks; this
    checks only the op.

    >>> ring = rd.DeviceRing(2, slot_elems=4)
    >>> x, status = cuda.to_device(np.ones((2, 3), np.int32)), new_status(ring)
    >>> enqueue(ring, x, x, status)
    >>> x.copy_to_host().tolist(), status.copy_to_host()[0, :, 0].tolist()
    ([[2, 2, 2], [2, 2, 2]], [0, 0])
    """
    if op not in dp.OPS:
        raise ValueError(f"op: expected one of {', '.join(dp.OPS)}, got {op!r}")
    kernel = rd.ring_all_reduce_kernel if kernel is None else kernel
    args = (dp.OPS[op], ring.group_threads, dp.SCOPES[ring.scope], spins_before_check)
    kernel[ring.nchannels, ring.nranks * ring.group_threads](
        local, out, ring.fifo(local.dtype), ring.tail, ring.head, ring.abort_word, status, *args
    )


def ring_kernel_with(recv_reduce_send: Any) -> Any:
    """The ring all-reduce kernel of :mod:`~nbcoll.comm.algorithms.ring_device`, compiled from its own body with
    ``dp.recv_reduce_send`` bound to ``recv_reduce_send`` (a device function of the same arguments,
    ``(prims, local, out, lo, hi)``): the same schedule, one primitive someone else wrote.

    >>> kernel = ring_kernel_with(dp.recv_reduce_send)      # the landed primitive: the landed kernel again
    >>> ring = rd.DeviceRing(3, slot_elems=2)
    >>> x, status = cuda.to_device(np.arange(6, dtype=np.int64).reshape(3, 2)), new_status(ring)
    >>> enqueue(ring, x, x, status, kernel=kernel)
    >>> x.copy_to_host().tolist()
    [[6, 9], [6, 9], [6, 9]]
    """
    # A copy of the primitives' module whose recv_reduce_send is the given one: Numba resolves `dp.name` in the
    # kernel's body through this module object when it compiles (on the simulator, when it runs).
    swapped = types.ModuleType(dp.__name__, dp.__doc__)
    swapped.__dict__.update({k: v for k, v in vars(dp).items() if not k.startswith("__")})
    swapped.recv_reduce_send = recv_reduce_send
    body = rd.ring_all_reduce_kernel.py_func
    namespace = dict(body.__globals__, dp=swapped)
    rebuilt = types.FunctionType(body.__code__, namespace, body.__name__, body.__defaults__, body.__closure__)
    rebuilt.__doc__ = body.__doc__
    return cuda.jit(rebuilt)
