"""Gradient buckets: the flat buffers DistributedDataParallel reduces, one collective (or hook call) each.

A bucket is also what a communication hook receives, with PyTorch's ``GradBucket`` methods::

    bucket.buffer()        the flat 1-D gradient of the bucket's parameters, side by side
    bucket.gradients()     each parameter's gradient: a view of its slot, shaped like the parameter
    bucket.parameters()    the parameters, in slot order
    bucket.index, bucket.is_last(), bucket.comm
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.nn import Parameter


@dataclass
class Bucket:
    """Parameters whose gradients are averaged by one all-reduce of one flat buffer."""

    index: int
    names: list[str]
    params: list[Parameter]
    offsets: list[int]  # where each parameter's gradient starts in ``flat``
    flat: Any  # a 1-D device array: the gradients, side by side
    ready: set[int] = field(default_factory=set)  # positions (in ``params``) whose gradient has arrived
    work: Any = None  # the all-reduce in flight (or what a communication hook returned)
    comm: Any = None  # the communicator of the DistributedDataParallel that owns the bucket
    last: bool = False  # the last bucket of a round: hooks that count iterations count on it

    def slot(self, k: int) -> Any:
        """The part of ``flat`` that holds parameter ``k``'s gradient, shaped like the parameter."""
        p = self.params[k]
        return self.flat[self.offsets[k] : self.offsets[k] + p.size].reshape(p.shape)

    # PyTorch's GradBucket, for communication hooks.
    def buffer(self) -> Any:
        """The flat 1-D device array of the bucket's gradients, in the bucket's dtype (a hook may change it)."""
        return self.flat

    def gradients(self) -> list[Any]:
        """Each parameter's gradient: a view of its slot of :meth:`buffer`, shaped like the parameter."""
        return [self.slot(k) for k in range(len(self.params))]

    def parameters(self) -> list[Parameter]:
        """The bucket's parameters, in the order of their slots."""
        return list(self.params)

    def is_last(self) -> bool:
        """Whether this is the last bucket reduced in a backward pass."""
        return self.last


def assign_buckets(named: list[tuple[str, Parameter]], cap_bytes: int, reduce_dtype: Any = None) -> list[Bucket]:
    """Fill buckets in reverse registration order; a bucket closes once it holds ``cap_bytes`` (one dtype each).

    A bucket's dtype is ``reduce_dtype`` when one is given, else its parameters' dtype.
    """
    buckets: list[Bucket] = []
    open_by_dtype: dict[np.dtype, tuple[list[str], list[Parameter]]] = {}

    def close(dtype: np.dtype) -> None:
        names, params = open_by_dtype.pop(dtype)
        offsets = list(np.cumsum([0] + [p.size for p in params[:-1]]).astype(int))
        flat = memory.zeros(sum(p.size for p in params), dtype)
        buckets.append(Bucket(len(buckets), names, params, offsets, flat))

    for name, p in reversed(named):
        dtype = np.dtype(reduce_dtype or p.dtype)
        names, params = open_by_dtype.setdefault(dtype, ([], []))
        names.append(name)
        params.append(p)
        if sum(q.size for q in params) * dtype.itemsize >= cap_bytes:
            close(dtype)
    for dtype in list(open_by_dtype):
        close(dtype)
    if buckets:
        buckets[-1].last = True
    return buckets


def completed(work: Any) -> bool:
    """Whether a bucket's reduction has finished (a synchronous hook's result has)."""
    return work.is_completed() if hasattr(work, "is_completed") else True


def wait_for(work: Any) -> Any:
    """The reduced buffer: ``work.wait()`` for an asynchronous reduction, ``work`` itself for a synchronous hook's."""
    return work.wait() if hasattr(work, "wait") else work


def check_hook_result(reduced: Any, bucket: Bucket) -> None:
    if not memory.is_device_array(reduced) or tuple(reduced.shape) != tuple(bucket.flat.shape):
        raise TypeError(
            f"hook: expected the reduced bucket, a 1-D device array of {bucket.flat.size} elements "
            f"(or a handle whose wait() gives it), got {type(reduced).__name__} {getattr(reduced, 'shape', '')}"
        )
    if reduced.dtype != bucket.flat.dtype:
        raise TypeError(f"hook: expected the bucket's dtype {bucket.flat.dtype}, got {reduced.dtype}")


__all__ = ["Bucket", "assign_buckets", "check_hook_result", "completed", "wait_for"]
