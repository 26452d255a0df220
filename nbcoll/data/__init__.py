"""Data loading: datasets, a batching loader with background prefetch, and the distributed sampler.

Example::

    from nbcoll.data import DataLoader, DistributedSampler, TensorDataset
    dataset = TensorDataset(images, labels)
    loader = DataLoader(dataset, batch_size=64, shuffle=True, seed=0, prefetch=2)
"""

from nbcoll.data.dataset import Dataset, TensorDataset, collate
from nbcoll.data.loader import DataLoader, PrefetchIterator, to_tensors
from nbcoll.data.sampler import DistributedSampler

__all__ = ["DataLoader", "Dataset", "DistributedSampler", "PrefetchIterator", "TensorDataset", "collate", "to_tensors"]
