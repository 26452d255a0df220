"""Tutorial 22 (PyTorch on nbcoll) runs on numpy and checks itself: torch.distributed's collectives on "nbcoll"
give gloo's results, and DistributedDataParallel and fully_shard trained on "nbcoll" end with gloo's parameters,
with the bytes nbcoll counted. Without torch, the tutorial says so in one line and exits 0."""

import importlib.util

import pytest
from helpers import TUTORIALS, run_python

pytestmark = pytest.mark.mpi

TUTORIAL = TUTORIALS / "22_pytorch_on_nbcoll.py"


def test_tutorial_22_trains_torch_models_on_nbcoll_as_on_gloo():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: tutorial 22 runs torch.distributed on nbcoll")
    proc = run_python([str(TUTORIAL)], "numpy", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("[rank 0]\nTutorial 22 on the 'numpy' backend, 2 ranks, torch ")
    assert "dist.get_backend() = 'nbcoll'; the group is ProcessGroupNbcoll" in out
    assert "all_reduce              [0.0, 3.0, 6.0, 9.0, 12.0] on both" in out
    assert "all_gather_into_tensor  [1, 1, 1, 11, 11, 11] on both" in out
    assert "reduce_scatter_tensor   [1.0, 3.0, 5.0] on both" in out
    assert "nbcoll ran all_reduce(count=5, dtype=float32, op=sum) via " in out and ": 20 bytes sent" in out
    assert "all_reduce(t, async_op=True) -> NbcollWork; after wait() every element is 3.0 on both" in out
    assert out.count("every parameter equals gloo's within 1e-6") == 2
    assert "5 x all_reduce(count=66, dtype=float32, op=sum) via " in out
    assert "bytes rank 0 sent: 1344 = 5 x 264 (each step's gradients, once) + 24 (its broadcast" in out
    assert "10 x all_gather(count=24, dtype=float32) via " in out
    assert "bytes rank 0 sent: 2400 = 5 x 3 x 160" in out
    assert "and equals DDP's within 1e-6" in out
    assert 'Done: torch\'s collectives, DistributedDataParallel and fully_shard run on "nbcoll"' in out
    assert "(printed nothing: it ran the same script silently and exited with status 0)" in out


def test_tutorial_22_without_torch_says_so_in_one_line_and_exits_0():
    # sys.modules["torch"] = None: to importlib, torch is not installed; the tutorial stops before it re-launches.
    code = "import runpy, sys; sys.modules['torch'] = None; sys.argv = [sys.argv[1]]; runpy.run_path(sys.argv[0])"
    proc = run_python(["-c", code, str(TUTORIAL)], "numpy", timeout=60)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.splitlines() == [
        "Tutorial 22 needs PyTorch (pip install torch), which is not installed here: nothing to run."
    ]
