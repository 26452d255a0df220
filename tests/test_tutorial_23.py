"""Tutorial 23 (precision and compression) runs on numpy and checks itself: the formats round as ml_dtypes does, an
injected float16 overflow is skipped and halves the scale, and the compressed data-parallel runs send the bytes
their methods should (half for the float16 hook, far fewer for PowerSGD and local SGD) at nearly the same accuracy."""

import re

import pytest
from helpers import TUTORIALS, run_python

pytestmark = pytest.mark.mpi


def test_tutorial_23_trains_in_low_precision_and_sends_fewer_bytes(tmp_path):
    proc = run_python([str(TUTORIALS / "23_precision_and_compression.py"), "--out", str(tmp_path)], "numpy")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("[rank 0]\nTutorial 23 on the 'numpy' backend, 2 ranks")
    # 3.14159 in bfloat16 keeps 8 significant bits; 500 is past e4m3fn's 448 (NaN) and 1e5 past e5m2's 57344 (inf).
    assert "     bfloat16       0 10000000 1001001                 3.140625\n" in out
    assert "     float8_e4m3fn  0 1111 111                         nan\n" in out
    assert "     float8_e5m2    0 11111 00                         inf\n" in out
    assert "the step is skipped" in out and "the scale halved, 65,536 -> 32,768" in out
    amp = {
        name: float(acc)
        for name, acc in re.findall(r"^   (float32|bfloat16 autocast|float16 \S+ \S+ \S+) +(\S+)%", out, re.M)
    }
    assert len(amp) == 3 and min(amp.values()) >= 93, amp
    ddp = {
        name.strip(): (float(acc), int(sent.replace(",", "")))
        for name, acc, sent in re.findall(r"^   (DDP .+?) +(\S+)% +([\d,]+) ", out, re.M)
    }
    assert list(ddp) == [
        "DDP float32",
        "DDP fp16_compress_hook",
        "DDP PowerSGD rank 2",
        "DDP post-local SGD, period 4",
    ], ddp
    plain = ddp["DDP float32"][1]
    assert plain == 2 * 46 * 9610 * 4  # 2 ranks, 46 steps, every gradient of the 64-128-10 MLP in float32
    assert ddp["DDP fp16_compress_hook"][1] * 2 == plain
    assert ddp["DDP PowerSGD rank 2"][1] * 5 < plain and ddp["DDP post-local SGD, period 4"][1] * 2 < plain
    assert min(acc for acc, _ in ddp.values()) >= ddp["DDP float32"][0] - 3
    assert (tmp_path / "precision_and_compression.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "\nDone: bfloat16, float16 and compressed gradients train as float32 does" in out
