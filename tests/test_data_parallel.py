"""Data parallelism: the same parameters as one process after K steps, overlap shown by event order, errors.

One launch per rank count (``mpi_scripts/parallel_ddp.py``) runs SGD with momentum and Adam, several bucket
sizes, gradient accumulation with ``no_sync``, the overlap check and the bad uses; ``mpi_scripts/parallel_zero.py``
runs ZeroRedundancyOptimizer stages 1 and 2 on 3 ranks.
"""

from pathlib import Path

import numpy as np
import pytest

import nbcoll
from nbcoll import nn
from nbcoll.testing import run_ranks

SCRIPT = Path(__file__).parent / "mpi_scripts" / "parallel_ddp.py"
ZERO_SCRIPT = Path(__file__).parent / "mpi_scripts" / "parallel_zero.py"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_ddp_trains_the_same_model_as_one_process(nprocs):
    result = run_ranks(nprocs, SCRIPT, env={"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}, timeout=300)
    for rank in range(nprocs):
        assert "data parallel ok" in result.outputs[rank], result.report()


@pytest.mark.mpi
def test_zero_stages_1_and_2_train_the_same_model_as_one_process_with_uneven_shards():
    result = run_ranks(3, ZERO_SCRIPT, env={"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60"}, timeout=300)
    for rank in range(3):
        assert "zero ok" in result.outputs[rank], result.report()
    assert "stage 2 [30, 45) of 43" in result.outputs[2]  # the last shard holds 13 elements and 2 of padding


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
