"""Datasets: anything with ``len(dataset)`` and ``dataset[i]``, and a way to fetch a whole batch at once.

Example::

    dataset = TensorDataset(images, labels)       # arrays with the same first dimension
    len(dataset)                                  # number of examples
    x, y = dataset[0]                             # one example
    xs, ys = dataset.get_batch(np.array([0, 5, 2]))  # a batch, stacked along a new first axis
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nbcoll.tensors import Tensor


def collate(items: Sequence[Any]) -> Any:
    """Stack a list of examples into a batch, field by field, as PyTorch's ``default_collate`` does.

    Numbers and arrays become one array stacked along a new first axis; tuples and lists become a tuple or list
    of their fields collated (``[(x0, y0), (x1, y1)] -> (stack([x0, x1]), stack([y0, y1]))``); dicts a dict of
    their values collated; strings stay a list.

    >>> import numpy as np
    >>> from nbcoll.data import collate
    >>> x, y = collate([(np.zeros(3), 0), (np.ones(3), 1)])
    >>> x.shape, y
    ((2, 3), array([0, 1]))
    >>> collate([{"id": 7, "word": "a"}, {"id": 8, "word": "b"}])
    {'id': array([7, 8]), 'word': ['a', 'b']}
    """
    first = items[0]
    if isinstance(first, str | bytes):
        return list(items)
    if isinstance(first, tuple | list):
        for item in items:
            if len(item) != len(first):
                raise ValueError(
                    f"items: every example must have as many fields as the first ({len(first)}), got {len(item)}"
                )
        fields = [collate([item[k] for item in items]) for k in range(len(first))]
        if isinstance(first, list):
            return fields
        return type(first)(*fields) if hasattr(first, "_fields") else tuple(fields)  # a namedtuple keeps its type
    if isinstance(first, dict):
        return {key: collate([item[key] for item in items]) for key in first}
    return np.stack([np.asarray(item) for item in items])


class Dataset:
    """The base class: subclasses define ``__len__`` and ``__getitem__``; ``get_batch`` may be made faster.

    Example::

        >>> import numpy as np
        >>> from nbcoll.data import Dataset
        >>> class Squares(Dataset):
        ...     def __len__(self):
        ...         return 100
        ...
        ...     def __getitem__(self, i):
        ...         return np.float32(i), np.float32(i * i)
        >>> Squares()[3]
        (np.float32(3.0), np.float32(9.0))
        >>> Squares().get_batch(np.array([2, 3]))
        (array([2., 3.], dtype=float32), array([4., 9.], dtype=float32))
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def get_batch(self, indices: np.ndarray) -> Any:
        """The examples at ``indices``, collated into one batch (host NumPy arrays).

        >>> import numpy as np
        >>> from nbcoll.data import TensorDataset
        >>> dataset = TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
        >>> dataset.get_batch(np.array([4, 0]))
        (array([[8., 9.],
               [0., 1.]]), array([4, 0]))
        """
        return collate([self[int(i)] for i in indices])


class TensorDataset(Dataset):
    """Examples are the rows of arrays that share their first dimension (inputs, targets, ...).

    Example::

        >>> import numpy as np
        >>> from nbcoll.data import TensorDataset
        >>> dataset = TensorDataset(np.random.default_rng(0).random((100, 8)), np.arange(100))
        >>> x, y = dataset[3]
        >>> len(dataset), x.shape, y
        (100, (8,), np.int64(3))

    Arrays stay on the host (Tensors are copied there once); the loader moves each batch to the device.
    """

    def __init__(self, *arrays: Any) -> None:
        if not arrays:
            raise ValueError("arrays: TensorDataset needs at least one array")
        hosts = [a.numpy() if isinstance(a, Tensor) else np.asarray(a) for a in arrays]
        for k, a in enumerate(hosts):
            if a.ndim == 0:
                raise ValueError(f"arrays[{k}]: expected at least one dimension (the examples), got a scalar")
            if a.shape[0] != hosts[0].shape[0]:
                raise ValueError(
                    f"arrays[{k}]: first dimension {a.shape[0]} differs from arrays[0]'s {hosts[0].shape[0]}"
                )
        self.arrays = tuple(hosts)

    def __len__(self) -> int:
        return self.arrays[0].shape[0]

    def __getitem__(self, index: int) -> tuple[np.ndarray, ...]:
        return tuple(a[index] for a in self.arrays)

    def get_batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(a[indices] for a in self.arrays)  # one fancy-indexing copy per array, no per-example loop
