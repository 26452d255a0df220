"""ZeroRedundancyOptimizer stages 1 and 2 against one process trained on the same global batches.

``mpiexec -n 3 python parallel_zero.py``: the model has 43 parameters, so the shards are uneven (the last one
padded) on 2, 3 and 4 ranks.
"""

from __future__ import annotations

import numpy as np
from parallel_ddp import STEPS, TOLERANCE, make_model, train

import nbcoll
from nbcoll import optim
from nbcoll.parallel import DistributedDataParallel
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
    got = dict((model.module if stage == 1 else model).named_parameters())
    for name, p in reference.named_parameters():
        error = np.max(np.abs(got[name].numpy() - p.numpy())) / np.max(np.abs(p.numpy()))
        assert error <= TOLERANCE, f"rank {r}: stage {stage} {name} differs from one process by {error:.2e}"
    state = zero.optimizer.state[zero.shard]
    sizes = {k: v.size for k, v in state.items() if hasattr(v, "size")}
    assert all(size == zero.shard_size for size in sizes.values()), sizes  # state for this shard only
    if stage == 2:
        assert all(p.grad is None for p in model.parameters()), "stage 2 keeps only the gradient shard"
    start, stop = zero.shard_range
    return f"stage {stage} [{start}, {stop}) of {zero.total}"


def main() -> None:
    comm = nbcoll.init()
    assert 43 % comm.size or comm.size == 1
    results = [
        check_stage(comm, 1, optim.SGD, 1, lr=0.1, momentum=0.9),
        check_stage(comm, 1, optim.Adam, 2, lr=0.01),
        check_stage(comm, 2, optim.SGD, 2, lr=0.1, momentum=0.9),
        check_stage(comm, 2, optim.AdamW, 1, lr=0.01, weight_decay=0.1),
    ]
    for bad, fragment in [
        (lambda: ZeroRedundancyOptimizer(make_model(0).parameters(), optim.SGD, comm, stage=3, lr=0.1), "stage"),
        (lambda: ZeroRedundancyOptimizer([], optim.SGD, comm, lr=0.1), "empty"),
    ]:
        try:
            bad()
        except (TypeError, ValueError) as exc:
            assert fragment in str(exc), exc
        else:
            raise AssertionError(f"no error for {fragment}")
    comm.destroy()
    print(f"rank {comm.rank}: zero ok after {STEPS} steps: {'; '.join(results)}")


if __name__ == "__main__":
    main()
