"""Distributed training on nbcoll's own communicator: differentiable collectives and data parallelism.

Example::

    import nbcoll
    from nbcoll.parallel import DistributedDataParallel, functional

    comm = nbcoll.init()
    model = DistributedDataParallel(model, comm)      # parameters broadcast from rank 0
    loss_fn(model(x), y).backward()                   # gradients averaged over the ranks, bucket by bucket
"""

from nbcoll.parallel import functional
from nbcoll.parallel.checkpoint import load_sharded, save_sharded
from nbcoll.parallel.context_parallel import ring_attention, ulysses_attention, zigzag_merge, zigzag_split
from nbcoll.parallel.data_parallel import DistributedDataParallel
from nbcoll.parallel.fsdp import Shard, fully_shard, gathered_parameters, sharded_state_dict
from nbcoll.parallel.zero import ZeroRedundancyOptimizer

__all__ = [
    "DistributedDataParallel",
    "Shard",
    "ZeroRedundancyOptimizer",
    "fully_shard",
    "functional",
    "gathered_parameters",
    "load_sharded",
    "ring_attention",
    "save_sharded",
    "sharded_state_dict",
    "ulysses_attention",
    "zigzag_merge",
    "zigzag_split",
]

# Model parallelism: meshes, tensor, pipeline and expert parallel.
from nbcoll.parallel.experts import MixtureOfExperts  # noqa: E402
from nbcoll.parallel.mesh import DeviceMesh  # noqa: E402
from nbcoll.parallel.pipeline import Pipeline  # noqa: E402
from nbcoll.parallel.tensor_parallel import (  # noqa: E402
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    vocab_parallel_cross_entropy,
)
from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock, tensor_parallel_block  # noqa: E402

__all__ += [
    "ColumnParallelLinear",
    "DeviceMesh",
    "MixtureOfExperts",
    "ParallelTransformerBlock",
    "Pipeline",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "tensor_parallel_block",
    "vocab_parallel_cross_entropy",
]

# Sequence parallelism: the tensor-parallel block's norms and dropouts split along the sequence.
from nbcoll.parallel.sequence_parallel import (  # noqa: E402
    SequenceParallelBlock,
    all_gather_sequence,
    gather_sequence,
    reduce_scatter_sequence,
    sequence_parallel_block,
    split_sequence,
)

__all__ += [
    "SequenceParallelBlock",
    "all_gather_sequence",
    "gather_sequence",
    "reduce_scatter_sequence",
    "sequence_parallel_block",
    "split_sequence",
]
