"""Which examples each replica of a data-parallel job reads: ``DistributedSampler``.

Each epoch the indices ``0 .. n-1`` are shuffled with a seed every replica shares (``seed + epoch``), and
replica ``rank`` of ``R`` takes every ``R``-th index starting at ``rank``, so the shards are disjoint and
balanced. What happens to the ``n % R`` left-over indices::

    drop_last=False, pad=True    (default, PyTorch's behaviour)  the list is padded by repeating its first
                                 indices until it divides by R: every index is read at least once, and exactly
                                 R * ceil(n / R) - n of them (fewer than R) twice; every shard has ceil(n / R).
    drop_last=True               the list is cut to R * floor(n / R): every index kept is read exactly once,
                                 n % R are skipped (different ones each epoch when shuffling); floor(n / R) each.
    drop_last=False, pad=False   nothing is added or dropped: every index is read exactly once; the first
                                 n % R shards have one index more than the others (for evaluation, where the
                                 replicas need not step in lockstep).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


class DistributedSampler:
    """Indices of the examples one replica reads, a disjoint shard of a shared shuffled order.

    Example::

        >>> from nbcoll.data import DistributedSampler
        >>> shards = [DistributedSampler(10, num_replicas=3, rank=r, seed=0) for r in range(3)]
        >>> for sampler in shards:
        ...     sampler.set_epoch(0)            # a new order each epoch, the same on every replica
        >>> [list(sampler) for sampler in shards]       # 10 indices padded to 12: 4 each
        [[4, 7, 9, 1], [6, 3, 0, 4], [2, 5, 8, 6]]

    ``dataset`` may be a dataset or its length.
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int,
        rank: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        pad: bool = True,
    ) -> None:
        n = dataset if isinstance(dataset, int | np.integer) else len(dataset)
        if not isinstance(num_replicas, int | np.integer) or num_replicas < 1:
            raise ValueError(f"num_replicas: expected a positive integer, got {num_replicas!r}")
        if not isinstance(rank, int | np.integer) or not 0 <= rank < num_replicas:
            raise ValueError(f"rank: expected an integer in [0, {num_replicas}), got {rank!r}")
        self.dataset_size, self.num_replicas, self.rank = int(n), int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last, self.pad = shuffle, int(seed), drop_last, pad
        self.epoch = 0
        if drop_last:
            self.num_samples = self.dataset_size // self.num_replicas
        elif pad:
            self.num_samples = -(-self.dataset_size // self.num_replicas)
        else:
            self.num_samples = len(range(self.rank, self.dataset_size, self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas if (drop_last or pad) else self.dataset_size

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch's order: every replica must set the same epoch to get disjoint shards.

        >>> from nbcoll.data import DistributedSampler
        >>> sampler = DistributedSampler(6, num_replicas=2, rank=0, seed=0)
        >>> sampler.set_epoch(1)
        >>> list(sampler)
        [1, 3, 2]
        """
        self.epoch = int(epoch)

    def order(self) -> np.ndarray:
        """The epoch's order of all indices, padded or cut as described in the module docstring.

        >>> from nbcoll.data import DistributedSampler
        >>> DistributedSampler(5, num_replicas=2, rank=0, shuffle=False).order()     # padded by repeating index 0
        array([0, 1, 2, 3, 4, 0])
        """
        if self.shuffle:
            indices = np.random.default_rng([self.seed, self.epoch]).permutation(self.dataset_size)
        else:
            indices = np.arange(self.dataset_size)
        if self.total_size > self.dataset_size and self.dataset_size:
            repeats = -(-self.total_size // self.dataset_size)
            indices = np.tile(indices, repeats)
        return indices[: self.total_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order()[self.rank :: self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples
