"""ZeroRedundancyOptimizer stages 1 and 2 against one process trained on the same global batches.

``mpiexec -n 3 python parallel_zero.py``: the model has 43 parameters, so the shards are uneven (the last one
padded) on 2, 3 and 4 ranks.
"""

from __future__ import annotations

import gc

import numpy as np
import parallel_ddp as shared
from parallel_ddp import STEPS, expect_error, make_model, train

import nbcoll
from nbcoll import memory, nn, optim
from nbcoll.parallel import DistributedDataParallel
from nbcoll.parallel.fsdp import fully_shard
from nbcoll.parallel.zero import ZeroRedundancyOptimizer

HIDDEN = 5


def check_stage(comm, stage: int, optimizer_class, micro_batches: int, **kwargs) -> str:
    n, r = comm.size, comm.rank
    reference = make_model(0, HIDDEN, first_bias=False)
    train(reference, optimizer_class(reference.parameters(), **kwargs), n, None, micro_batches)
    model = make_model(100 * r, HIDDEN, first_bias=False)  # different on each rank: the wrapper broadcasts rank 0's
    if stage == 1:
        model = DistributedDataParallel(model, comm, bucket_cap_mb=1e-4)
    zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class, comm, stage=stage, **kwargs)
    train(model, zero, n, r, micro_batches)
    got = {name: p.numpy() for name, p in (model.module if stage == 1 else model).named_parameters()}
    shared.assert_matches(reference, got, r, f"stage {stage} ")
    state = zero.optimizer.state[zero.shard]
    sizes = {k: v.size for k, v in state.items() if hasattr(v, "size")}
    assert all(size == zero.shard_size for size in sizes.values()), sizes  # state for this shard only
    if stage == 2:
        assert all(p.grad is None for p in model.parameters()), "stage 2 keeps only the gradient shard"
    start, stop = zero.shard_range
    return f"stage {stage} [{start}, {stop}) of {zero.total}"


def settled_bytes(comm) -> int:
    """Allocated bytes once the communicator's flight recorder has let go of earlier operations' buffers."""
    for _ in range(40):  # it remembers the last 32 operations, buffers included: make them all barriers
        comm.barrier()
    gc.collect()
    return memory.stats().allocated_bytes


def bytes_kept(comm, stage: int) -> int:
    """Bytes a rank holds after one float32 Adam step: parameters, gradients and optimizer state."""
    before = settled_bytes(comm)
    nbcoll.manual_seed(0)
    first = nn.Linear(5, HIDDEN, bias=False, dtype=np.float32)
    model = nn.Sequential(first, nn.Tanh(), nn.Linear(HIDDEN, 3, dtype=np.float32))
    if stage < 2:
        model = DistributedDataParallel(model, comm)  # stages 0 and 1 average gradients in DDP's buckets
    if stage == 3:
        model = fully_shard(model, comm)
    if stage in (0, 3):
        optimizer = optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optim.Adam, comm, stage=stage, lr=0.01)
    x = nbcoll.tensor(np.ones((2, 5), np.float32))
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
    del x
    kept = settled_bytes(comm) - before
    assert model is not None and optimizer is not None  # alive until measured
    return kept


def check_memory_formulas(comm) -> str:
    """The ZeRO paper's bytes per parameter for float32 with Adam (4 parameter + 4 gradient + 8 state), with the
    sharded parts divided by the rank count, where a shard is S = ceil(P / ranks) elements (padding included);
    stage 3 pads each parameter's rows instead."""
    n, params = comm.size, 43
    shard = -(-params // n)
    rows = [-(-5 // n) * 5, -(-3 // n) * 5, -(-3 // n)]  # stage 3 shards each parameter's rows: (5, 5), (3, 5), (3,)
    expected = {
        0: 4 * params + 4 * params + 8 * params,  # DDP: everything replicated
        1: 4 * shard * n + 4 * params + 8 * shard,  # optimizer state sharded
        2: 4 * shard * n + 4 * shard + 8 * shard,  # and gradients
        3: (4 + 4 + 8) * sum(rows),  # and parameters
    }
    measured = {stage: bytes_kept(comm, stage) for stage in expected}
    assert measured == expected, f"rank {comm.rank}: measured {measured}, expected {expected}"
    return ", ".join(f"stage {k}: {v} B" for k, v in measured.items())


def run_checks(comm) -> list[str]:
    """Every check of this file; returns the lines to print."""
    results = [
        check_stage(comm, 1, optim.SGD, 1, lr=0.1, momentum=0.9),
        check_stage(comm, 1, optim.Adam, 2, lr=0.01),
        check_stage(comm, 2, optim.SGD, 2, lr=0.1, momentum=0.9),
        check_stage(comm, 2, optim.AdamW, 1, lr=0.01, weight_decay=0.1),
    ]
    memory_line = check_memory_formulas(comm)
    for bad, fragment in [
        (lambda: ZeroRedundancyOptimizer(make_model(0).parameters(), optim.SGD, comm, stage=3, lr=0.1), "stage"),
        (lambda: ZeroRedundancyOptimizer([], optim.SGD, comm, lr=0.1), "empty"),
    ]:
        expect_error(bad, fragment, errors=(TypeError, ValueError))
    return [
        f"rank {comm.rank}: zero ok after {STEPS} steps: {'; '.join(results)}",
        f"rank {comm.rank}: memory per rank of 43 float32 parameters with Adam: {memory_line}",
    ]


if __name__ == "__main__":
    shared.print_checks(run_checks)
