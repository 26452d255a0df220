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
from nbcoll.parallel.experts import (  # noqa: E402
    MixtureOfExperts,
    all_reduce_shared_gradients,
    full_expert_state,
    load_expert_state,
)
from nbcoll.parallel.mesh import DeviceMesh, init_device_mesh  # noqa: E402
from nbcoll.parallel.pipeline import Pipeline  # noqa: E402
from nbcoll.parallel.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe  # noqa: E402
from nbcoll.parallel.tensor_parallel import (  # noqa: E402
    ColumnParallelLinear,
    RowParallelLinear,
    copy_to_region,
    full_state_dict,
    load_full_state,
)
from nbcoll.parallel.tensor_parallel_transformer import ParallelTransformerBlock, tensor_parallel_block  # noqa: E402
from nbcoll.parallel.vocab_parallel import (  # noqa: E402
    VocabParallelEmbedding,
    padded_vocab_size,
    vocab_parallel_cross_entropy,
)

__all__ += [
    "ColumnParallelLinear",
    "DeviceMesh",
    "MixtureOfExperts",
    "ParallelTransformerBlock",
    "Pipeline",
    "PipelineStage",
    "Schedule1F1B",
    "ScheduleGPipe",
    "all_reduce_shared_gradients",
    "copy_to_region",
    "full_expert_state",
    "full_state_dict",
    "init_device_mesh",
    "load_expert_state",
    "load_full_state",
    "padded_vocab_size",
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

from nbcoll.parallel.mixed_precision import MixedPrecision  # noqa: E402

__all__ += ["MixedPrecision"]

# Gradient compression and local SGD: DDP communication hooks and periodic model averaging.
from nbcoll.parallel.comm_hooks import allreduce_hook, bf16_compress_hook, fp16_compress_hook  # noqa: E402
from nbcoll.parallel.local_sgd import (  # noqa: E402
    PeriodicModelAverager,
    PostLocalSGDOptimizer,
    PostLocalSGDState,
    post_localSGD_hook,
)
from nbcoll.parallel.powersgd import PowerSGDState, powerSGD_hook  # noqa: E402

__all__ += ["PowerSGDState", "allreduce_hook", "bf16_compress_hook", "fp16_compress_hook", "powerSGD_hook"]
__all__ += ["PeriodicModelAverager", "PostLocalSGDOptimizer", "PostLocalSGDState", "post_localSGD_hook"]
