"""``DataLoader``: batches of a dataset, shuffled per epoch, optionally prepared ahead by a background thread.

Example::

    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, seed=0, prefetch=2)
    for epoch in range(10):
        for xb, yb in loader:               # nbcoll.Tensors on the current backend
            ...

One epoch, in order::

    order   = shuffled(range(len(dataset)), seed, epoch)  or  the sampler's indices  or  0 .. n-1
    batches = order[0:B], order[B:2B], ...                (the last one shorter, or dropped with drop_last)
    for each batch: dataset.get_batch(indices) -> host arrays -> Tensors on the device

The dataset may be an nbcoll :class:`Dataset`, whose ``get_batch`` fetches a batch at once, or any object with
``len()`` and ``dataset[i]`` (a list, a NumPy array, a PyTorch-style map dataset), whose examples are read one
by one and stacked by :func:`collate`. An error while preparing batch ``k`` is raised when the loop reaches
batch ``k``, with or without prefetch. A ``StopIteration`` from the dataset is such an error too, a
``RuntimeError`` naming the batch, never a silent early end of the epoch: an epoch ends after ``len(dataset)``
examples.

**Prefetch.** With ``prefetch=N`` a thread runs that loop ahead of the training step and keeps up to ``N``
finished batches (already copied to the device) in a queue, so that reading and copying the next batch overlaps
the current step (NumPy and the device copies release the GIL). The batches are the same, in the same order, as
without prefetch. The thread never outlives its iterator: it stops when the epoch ends, when the loop is left
early (``break``, an exception, or the iterator being garbage-collected) and after an error of its own, which
the caller's loop re-raises, with the thread's traceback, at the batch where it happened.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from nbcoll.data.dataset import Dataset, collate
from nbcoll.seed import next_seed
from nbcoll.tensors import Tensor

_POLL_SECONDS = 0.05
"""How often a blocked producer or consumer looks up to see whether the other side has gone."""

_JOIN_SECONDS = 30.0
"""How long closing an iterator waits for a thread that is in the middle of preparing a batch."""


def to_tensors(batch: Any) -> Any:
    """Host arrays of a batch (in tuples, lists, dicts) as Tensors on the current backend.

    >>> import numpy as np
    >>> from nbcoll.data import to_tensors
    >>> batch = to_tensors({"x": np.zeros((2, 3), np.float32), "y": [np.arange(2)]})
    >>> type(batch["x"]).__name__, batch["y"][0].tolist()
    ('Tensor', [0, 1])
    """
    if isinstance(batch, np.ndarray):
        return Tensor(batch)
    if isinstance(batch, tuple | list):
        return type(batch)(to_tensors(b) for b in batch)
    if isinstance(batch, dict):
        return {key: to_tensors(value) for key, value in batch.items()}
    return batch


class DataLoader:
    """Iterate over a dataset in batches; each ``for`` over the loader is one epoch.

    Example::

        >>> import numpy as np
        >>> from nbcoll.data import DataLoader, TensorDataset
        >>> dataset = TensorDataset(np.arange(20.0).reshape(10, 2), np.arange(10))
        >>> loader = DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True, seed=1, prefetch=2)
        >>> len(loader)                               # batches per epoch
        2
        >>> for xb, yb in loader:
        ...     print(xb.shape, yb.shape)
        (4, 2) (4,)
        (4, 2) (4,)

    ``shuffle`` draws a new order every epoch from ``(seed, epoch)``, so two loaders with one seed agree; with
    ``seed=None`` the seed is drawn once from nbcoll's generator, which ``nbcoll.manual_seed`` restarts.
    ``dataset`` is a :class:`Dataset` or any object with ``len()`` and indexing (a list of examples, say).
    ``sampler`` (a :class:`DistributedSampler`, or any iterable of indices) replaces the loader's own order.
    ``device=False`` keeps batches as host NumPy arrays; otherwise they become Tensors. ``prefetch=N`` prepares
    ``N`` batches ahead in a background thread.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int | None = None,
        sampler: Iterable[int] | None = None,
        prefetch: int = 0,
        device: bool = True,
    ) -> None:
        if not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
        if not isinstance(prefetch, int | np.integer) or prefetch < 0:
            raise ValueError(f"prefetch: expected an integer >= 0 (batches prepared ahead), got {prefetch!r}")
        if sampler is not None and shuffle:
            raise ValueError("shuffle: leave it False with a sampler; the sampler decides the order")
        # Looked up on the type, as len() and [] do: a class itself is not a dataset.
        if not hasattr(type(dataset), "__len__") or not hasattr(type(dataset), "__getitem__"):
            raise TypeError(
                f"dataset: expected a Dataset or an object with len() and indexing, got {type(dataset).__name__}"
            )
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, int(batch_size), shuffle, drop_last
        self.seed = next_seed() if seed is None else int(seed)
        self.sampler, self.prefetch, self.device = sampler, int(prefetch), device
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the shuffled order of the next epoch (each ``for`` also advances it by one).

        >>> import numpy as np
        >>> from nbcoll.data import DataLoader, TensorDataset
        >>> loader = DataLoader(TensorDataset(np.arange(6)), batch_size=6, shuffle=True, seed=0, device=False)
        >>> loader.set_epoch(3)
        >>> first = next(iter(loader))[0]
        >>> loader.set_epoch(3)
        >>> bool((next(iter(loader))[0] == first).all())          # the same epoch, the same order
        True
        """
        self.epoch = int(epoch)

    def _order(self) -> np.ndarray:
        if self.sampler is not None:
            return np.fromiter(iter(self.sampler), dtype=np.int64)
        if self.shuffle:
            return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.dataset))
        return np.arange(len(self.dataset))

    def _batch_indices(self) -> list[np.ndarray]:
        order = self._order()
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _fetch(self, indices: np.ndarray) -> Any:
        """The examples at ``indices`` as one batch of host arrays."""
        if isinstance(self.dataset, Dataset):
            return self.dataset.get_batch(indices)
        return collate([self.dataset[int(i)] for i in indices])

    def _make(self, job: tuple[int, np.ndarray]) -> Any:
        """Batch ``k`` of the epoch, ready for the loop (on the device unless ``device=False``)."""
        k, indices = job
        try:
            batch = self._fetch(indices)
        except StopIteration as stop:
            # Left alone it would end the epoch early (prefetch), or become PEP 479's anonymous RuntimeError.
            raise RuntimeError(
                f"dataset: raised StopIteration while preparing batch {k} (indices {indices.tolist()}); an epoch "
                f"ends after len(dataset) examples, so a dataset must not signal an end with StopIteration"
            ) from stop
        return to_tensors(batch) if self.device else batch

    def __iter__(self) -> Iterator[Any]:
        jobs = list(enumerate(self._batch_indices()))
        self.epoch += 1
        if self.prefetch == 0:
            return (self._make(job) for job in jobs)
        return PrefetchIterator(self._make, jobs, self.prefetch)


class _Failure:
    """A worker's exception, carried through the queue to the consumer."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class _Worker:
    """The producing side: its own object, so that the thread holds no reference to the iterator."""

    def __init__(self, make: Callable[[Any], Any], work: list[Any], depth: int) -> None:
        self.make, self.work = make, work
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="nbcoll-prefetch", daemon=True)

    def put(self, item: Any) -> bool:
        """Put ``item`` when there is room; False when the consumer has gone away meanwhile."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        try:
            for item in self.work:
                if self.stop.is_set() or not self.put(self.make(item)):
                    return
            self.put(_DONE)
        except StopIteration as stop:  # re-raised as it is, it would end the consumer's loop as if finished
            error = RuntimeError("PrefetchIterator: make raised StopIteration while preparing an item")
            error.__cause__ = stop
            self.put(_Failure(error))
        except BaseException as error:  # everything reaches the consumer, which re-raises it
            self.put(_Failure(error))

    def shutdown(self) -> None:
        """Stop the thread and wait for it: it finishes the batch in hand, then sees the stop flag."""
        self.stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(_JOIN_SECONDS)


class PrefetchIterator:
    """Iterates over ``make(item)`` for each item of ``work``, computed up to ``depth`` items ahead in a thread.

    Example::

        >>> from nbcoll.data import PrefetchIterator
        >>> batches = PrefetchIterator(lambda i: i * i, range(5), depth=2)      # i * i computed ahead in a thread
        >>> list(batches)
        [0, 1, 4, 9, 16]
        >>> batches.close()             # optional: it also closes itself at the end, on error and when collected
    """

    def __init__(self, make: Callable[[Any], Any], work: Iterable[Any], depth: int) -> None:
        if depth < 1:
            raise ValueError(f"depth: expected a positive number of items to prepare ahead, got {depth}")
        self._worker = _Worker(make, list(work), depth)
        self._finalizer = weakref.finalize(self, _Worker.shutdown, self._worker)
        self._worker.thread.start()

    def __iter__(self) -> PrefetchIterator:
        return self

    def __next__(self) -> Any:
        worker = self._worker
        if not self._finalizer.alive:
            raise StopIteration
        while True:
            try:
                item = worker.queue.get(timeout=_POLL_SECONDS)
                break
            except queue.Empty:
                if not worker.thread.is_alive() and worker.queue.empty():
                    self.close()
                    raise RuntimeError("DataLoader: the prefetch thread ended without finishing the epoch") from None
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            error = item.error
            if hasattr(error, "add_note"):
                error.add_note("(raised in the DataLoader's prefetch thread, while preparing a batch)")
            raise error
        return item

    def close(self) -> None:
        """Stop the background thread now; further ``next`` calls end the iteration.

        >>> from nbcoll.data import PrefetchIterator
        >>> batches = PrefetchIterator(lambda i: i, range(100), depth=2)
        >>> next(batches)
        0
        >>> batches.close()
        >>> list(batches)
        []
        """
        self._finalizer()

    def __enter__(self) -> PrefetchIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
