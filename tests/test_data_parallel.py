"""Data parallelism: the same parameters as one process after K steps, overlap shown by event order, errors.

One launch per rank count (``mpi_scripts/parallel_ddp.py --sharding``) runs DDP with SGD with momentum and Adam,
several bucket sizes, gradient accumulation with ``no_sync``, the overlap check and the bad uses, then
ZeroRedundancyOptimizer stages 1 and 2 (``parallel_zero.py``, with memory per rank for stages 0 to 3) and
fully_shard (``parallel_fsdp.py``).
"""

from pathlib import Path

import numpy as np
import pytest

import nbcoll
from nbcoll import nn
from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "parallel_ddp.py"
CHECKPOINT_SCRIPT = Path(__file__).parent / "mpi_scripts" / "parallel_checkpoint.py"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_ddp_zero_and_fully_shard_train_the_same_model_as_one_process(nprocs):
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}
    result = run_ranks(nprocs, SCRIPT, "--sharding", env=env, timeout=300)
    for rank in range(nprocs):
        for check in ("data parallel ok", "zero ok", "fully_shard ok"):
            assert f"rank {rank}: {check}" in result.outputs[rank], result.report()
    if nprocs == 3:  # 43 parameters: uneven shards of 15, 15 and 13 + 2 of padding
        assert "stage 2 [30, 45) of 43" in result.outputs[2]
        # float32 with Adam: 16 B per parameter replicated; 4 + 4 + 8/3; 4 + (4 + 8)/3; 16/3, padded.
        for rank in range(3):
            memory_line = "stage 0: 688 B, stage 1: 472 B, stage 2: 360 B, stage 3: 256 B"
            assert memory_line in result.outputs[rank], result.report()


@pytest.mark.mpi
def test_ddp_zero_2_and_fully_shard_on_the_simulator_in_float32_at_toy_size():
    env = {"NBCOLL_BACKEND": "sim", "NBCOLL_TIMEOUT": "120"}
    result = run_ranks(2, SCRIPT, "--float32", env=env, timeout=400)
    for rank in range(2):
        assert "data parallel float32 ok (2 buckets; stage 2" in result.outputs[rank], result.report()
        assert "fully_shard SGD: shards of 3 rows" in result.outputs[rank], result.report()


@pytest.mark.mpi
def test_sharded_checkpoints_resume_bit_exact_and_reshard_4_to_2_to_3_ranks(tmp_path):
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}
    first, second = str(tmp_path / "on4"), str(tmp_path / "on2")
    result = run_ranks(4, CHECKPOINT_SCRIPT, "save", first, env=env, timeout=300)
    assert all("resumed bit-exact" in out for out in result.outputs), result.report()
    result = run_ranks(2, CHECKPOINT_SCRIPT, "load", first, second, env=env, timeout=300)
    assert all("loaded on 2 ranks: the same parameters" in out for out in result.outputs), result.report()
    result = run_ranks(3, CHECKPOINT_SCRIPT, "load", second, env=env, timeout=300)
    assert all("loaded on 3 ranks: the same parameters" in out for out in result.outputs), result.report()


def test_backward_accumulates_each_leaf_as_soon_as_its_gradient_is_complete():
    """Leaves are reached in reverse order of forward, each before the earlier layers' nodes run."""
    with nbcoll.use_backend("numpy"):
        nbcoll.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
        events = []
        for name, p in model.named_parameters():
            p.register_post_accumulate_grad_hook(lambda p, name=name: events.append(name))
        x = nbcoll.tensor(np.ones((2, 3), np.float32), requires_grad=True)
        x.register_hook(lambda g: events.append("input"))
        model(x).sum().backward()
    params = [e for e in events if e != "input"]
    assert params == ["4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"], events
    assert events.index("input") > events.index("2.weight"), events
