"""DDP communication hooks: what a bucket's gradient becomes on the wire, with PyTorch's names.

A hook is ``hook(state, bucket)``; :meth:`DistributedDataParallel.register_comm_hook` calls it for every bucket
in place of the default average. ``state`` is whatever the hook needs (here a communicator, or None for the
bucket's own). Each hook below is PyTorch's hook of the same name (``torch.distributed.algorithms.ddp_comm_hooks``)::

    allreduce_hook:        all_reduce(buffer, avg)                                        the default
    fp16_compress_hook:    h = float16(buffer / n);  all_reduce(h, sum);  buffer = buffer.dtype(h)
    bf16_compress_hook:    the same in bfloat16 (float32's range, 8 bits of mantissa)

A compressed bucket puts half the bytes on the wire (the communicator's ``counters`` show it). The division
comes before the sum, as in PyTorch: the sum of n float16 values may overflow where their mean would not. It is
done in the bucket's dtype before the cast (PyTorch divides after it), so each value is rounded once.

PyTorch's hook returns a ``Future`` and chains the decompression with ``then``; ours returns the communicator's
``Work`` (``allreduce_hook``) or a :class:`Pending` that runs the decompression when DDP waits for it, so the
all-reduce still overlaps the rest of backward.

Example::

    model = DistributedDataParallel(model, comm)
    model.register_comm_hook(None, fp16_compress_hook)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.kernels import scale

if TYPE_CHECKING:
    from nbcoll.comm import Communicator
    from nbcoll.parallel.buckets import Bucket


class Pending:
    """An all-reduce in flight and what to do with its result: PyTorch's ``future.then(fn)``, run at ``wait()``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel.comm_hooks import Pending
    >>> comm = nbcoll.init()
    >>> work = comm.all_reduce(nbcoll.to_device(np.array([1.0, 2.0])), async_op=True)
    >>> pending = Pending(work, lambda reduced: reduced * 10)
    >>> nbcoll.to_host(pending.wait())
    array([10., 20.])
    >>> comm.destroy()
    """

    def __init__(self, work: Any, then: Callable[[Any], Any]) -> None:
        self.work, self.then = work, then
        self._done, self._result = False, None

    def is_completed(self) -> bool:
        """Whether the all-reduce has finished (the continuation may not have run yet).

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel.comm_hooks import Pending
        >>> comm = nbcoll.init()
        >>> pending = Pending(comm.all_reduce(nbcoll.to_device(np.ones(2)), async_op=True), lambda r: r)
        >>> _ = pending.wait(); pending.is_completed()
        True
        >>> comm.destroy()
        """
        return self._done or self.work.is_completed()

    def wait(self) -> Any:
        """Wait for the all-reduce, run the continuation once, and return its result.

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel.comm_hooks import Pending
        >>> comm = nbcoll.init()
        >>> pending = Pending(comm.all_reduce(nbcoll.to_device(np.ones(2)), async_op=True), lambda r: r + 1)
        >>> nbcoll.to_host(pending.wait()), nbcoll.to_host(pending.wait())     # the continuation ran once
        (array([2., 2.]), array([2., 2.]))
        >>> comm.destroy()
        """
        if not self._done:
            self._result = self.then(self.work.wait())
            self._done = True
        return self._result


def hook_comm(state: Any, bucket: Bucket) -> Communicator:
    """The communicator a hook reduces over: ``state`` when it is one (PyTorch's process group), else the bucket's."""
    comm = getattr(state, "process_group", state)
    return bucket.comm if comm is None else comm


def allreduce_hook(state: Any, bucket: Bucket) -> Any:
    """The default: average the bucket over the ranks, asynchronously (``state``: a communicator or None).

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import DistributedDataParallel, allreduce_hook
    >>> comm = nbcoll.init()
    >>> model = DistributedDataParallel(nn.Linear(2, 1), comm)
    >>> model.register_comm_hook(None, allreduce_hook)          # the same as registering nothing
    >>> model(nbcoll.tensor([[1.0, 2.0]])).sum().backward()
    >>> model.module.weight.grad.numpy()
    array([[1., 2.]], dtype=float32)
    >>> comm.destroy()
    """
    return hook_comm(state, bucket).all_reduce(bucket.buffer(), op="avg", async_op=True)


def _compress_hook(state: Any, bucket: Bucket, dtype: Any) -> Pending:
    """Divide by n and cast to ``dtype``, sum over the ranks, and cast the mean back into the bucket."""
    comm = hook_comm(state, bucket)
    buffer = bucket.buffer()
    scale.divide(buffer, comm.size)  # in the bucket's dtype, which the result overwrites: one rounding, not two
    compressed = copy_kernels.cast(buffer, dtype)
    work = comm.all_reduce(compressed, op="sum", async_op=True)

    def decompress(reduced: Any) -> Any:
        return copy_kernels.cast_into(buffer, reduced)

    return Pending(work, decompress)


def fp16_compress_hook(state: Any, bucket: Bucket) -> Pending:
    """Average the bucket in float16: half the bytes of float32 on the wire, 11 bits of mantissa.

    ``buffer = buffer.dtype(sum over ranks of float16(buffer / n))``: divided, then rounded, then summed.

    >>> import numpy as np, nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import DistributedDataParallel, fp16_compress_hook
    >>> comm = nbcoll.init()
    >>> model = DistributedDataParallel(nn.Linear(1, 1, bias=False), comm)
    >>> model.register_comm_hook(comm, fp16_compress_hook)
    >>> model(nbcoll.tensor([[1.0 / 3.0]])).sum().backward()
    >>> model.module.weight.grad.item() == float(np.float16(1.0 / 3.0))    # rounded to float16
    True
    >>> comm.destroy()
    """
    return _compress_hook(state, bucket, np.float16)


def bf16_compress_hook(state: Any, bucket: Bucket) -> Pending:
    """Average the bucket in bfloat16: float32's exponent range, half its bytes, 8 bits of mantissa.

    The same as :func:`fp16_compress_hook` with ``nbcoll.bfloat16``: the sums run in float32 and are rounded to
    bfloat16, as for float16.

    >>> import nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.parallel import DistributedDataParallel, bf16_compress_hook
    >>> comm = nbcoll.init()
    >>> model = DistributedDataParallel(nn.Linear(1, 1, bias=False), comm)
    >>> model.register_comm_hook(None, bf16_compress_hook)
    >>> model(nbcoll.tensor([[1.0 / 3.0]])).sum().backward()
    >>> model.module.weight.grad.item()                     # 1/3 with 8 bits of mantissa
    0.333984375
    >>> comm.destroy()
    """
    return _compress_hook(state, bucket, memory.bfloat16)


__all__ = ["Pending", "allreduce_hook", "bf16_compress_hook", "fp16_compress_hook", "hook_comm"]
