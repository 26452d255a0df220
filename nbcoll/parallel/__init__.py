"""Distributed training on nbcoll's own communicator: differentiable collectives and data parallelism.

Example::

    import nbcoll
    from nbcoll.parallel import DistributedDataParallel, functional

    comm = nbcoll.init()
    model = DistributedDataParallel(model, comm)      # parameters broadcast from rank 0
    loss_fn(model(x), y).backward()                   # gradients averaged over the ranks, bucket by bucket
"""

from nbcoll.parallel import functional

__all__ = ["functional"]
