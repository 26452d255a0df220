"""Distributed training on nbcoll's own communicator: differentiable collectives and data parallelism.

Example::

    import nbcoll
    from nbcoll.parallel import DistributedDataParallel, functional

    comm = nbcoll.init()
    model = DistributedDataParallel(model, comm)      # parameters broadcast from rank 0
    loss_fn(model(x), y).backward()                   # gradients averaged over the ranks, bucket by bucket
"""

from nbcoll.parallel import functional
from nbcoll.parallel.data_parallel import DistributedDataParallel
from nbcoll.parallel.zero import ZeroRedundancyOptimizer

__all__ = ["DistributedDataParallel", "ZeroRedundancyOptimizer", "functional"]
