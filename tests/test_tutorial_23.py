"""Tutorial 23 (precision and compression) runs on numpy and checks itself: the formats round as ml_dtypes does, an
injected float16 overflow is skipped and halves the scale, the digits MLP and the character model learn as much in
bfloat16 and float16 as in float32 (the character model's held-out loss well under the unigram model's), and the
compressed data-parallel runs send exactly the bytes their methods should at nearly the same accuracy."""

import math
import re

import numpy as np
import pytest
from helpers import TUTORIALS, run_python

from nbcoll.datasets import load_text

pytestmark = pytest.mark.mpi

PRECISIONS = ["float32", "bfloat16 autocast", "float16 autocast + GradScaler"]
HOOKS = ["DDP float32", "DDP fp16_compress_hook", "DDP bf16_compress_hook", "DDP PowerSGD rank 2"]


def unigram_loss(context: int) -> tuple[float, int]:
    """The held-out loss of the training text's character frequencies (add-one), and the training examples."""
    text = load_text()
    alphabet = sorted(set(text))
    targets = np.array([alphabet.index(c) for c in text[context:]])
    cut = int(0.9 * len(targets))
    counts = np.bincount(targets[:cut], minlength=len(alphabet)) + 1.0
    return float(-np.log(counts[targets[cut:]] / counts.sum()).mean()), cut


def test_tutorial_23_trains_both_models_in_low_precision_and_sends_fewer_bytes(tmp_path):
    proc = run_python([str(TUTORIALS / "23_precision_and_compression.py"), "--out", str(tmp_path)], "numpy")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("[rank 0]\nTutorial 23 on the 'numpy' backend, 2 ranks")
    # 3.14159 in bfloat16 keeps 8 significant bits; 500 is past e4m3fn's 448 (NaN) and 1e5 past e5m2's 57344 (inf).
    assert "     bfloat16       0 10000000 1001001                 3.140625\n" in out
    assert "     float8_e4m3fn  0 1111 111                         nan\n" in out
    assert "     float8_e5m2    0 11111 00                         inf\n" in out
    assert "the step is skipped" in out and "the scale halved, 65,536 -> 32,768" in out

    # Mixed precision: (model, run) -> (accuracy %, held-out loss).
    rows = re.findall(r"^   (digits|chars) +(float32|bfloat16 autocast|float16 \S+ \S+ \S+) +(\S+)% +(\S+) ", out, re.M)
    mixed = {(model, run): (float(acc), float(loss)) for model, run, acc, loss in rows}
    assert sorted(mixed) == sorted((model, run) for model in ("digits", "chars") for run in PRECISIONS), mixed
    assert min(mixed["digits", run][0] for run in PRECISIONS) >= 93, mixed
    unigram, train_examples = unigram_loss(context=4)
    [printed] = re.findall(r"^   chars +unigram \(the frequencies\) +(\S+)$", out, re.M)
    assert abs(float(printed) - unigram) < 1e-3 and 2.9 < unigram < 3.3, (printed, unigram)
    char_losses = [mixed["chars", run][1] for run in PRECISIONS]
    assert max(char_losses) < unigram - 0.3, (char_losses, unigram)  # every precision learned from the context
    assert max(char_losses) - min(char_losses) < 0.05, char_losses

    # Data parallel: (model, run) -> (accuracy %, held-out loss, bytes both ranks sent).
    rows = re.findall(r"^   (digits|chars) +(DDP .+?) +(\S+)% +(\S+) +([\d,]+) ", out, re.M)
    ddp = {(model, run): (float(acc), float(loss), int(sent.replace(",", ""))) for model, run, acc, loss, sent in rows}
    assert sorted(ddp) == sorted(
        [("digits", run) for run in [*HOOKS, "DDP post-local SGD, period 4"]] + [("chars", run) for run in HOOKS]
    ), ddp
    plain = ddp["digits", "DDP float32"][2]
    assert plain == 2 * 46 * 9610 * 4  # 2 ranks, 46 steps, every gradient of the 64-128-10 MLP in float32
    assert ddp["digits", "DDP fp16_compress_hook"][2] * 2 == plain == ddp["digits", "DDP bf16_compress_hook"][2] * 2
    assert (
        ddp["digits", "DDP PowerSGD rank 2"][2] * 5 < plain
        and ddp["digits", "DDP post-local SGD, period 4"][2] * 2 < plain
    )
    assert (
        min(acc for (model, _), (acc, _, _) in ddp.items() if model == "digits") >= ddp["digits", "DDP float32"][0] - 3
    )

    # The character model: embeddings of 8 for 59 characters, 4 of them side by side -> 64 -> 59.
    weights = [(59, 8), (64, 4 * 8), (59, 64)]
    biases = 64 + 59
    numbers = sum(a * b for a, b in weights) + biases
    steps = 2 * math.ceil(train_examples / 64)  # 2 epochs of global batches of 64
    assert numbers == 6419 and steps == 96
    assert ddp["chars", "DDP float32"][2] == 2 * steps * numbers * 4
    assert (
        ddp["chars", "DDP fp16_compress_hook"][2]
        == ddp["chars", "DDP bf16_compress_hook"][2]
        == 2 * steps * numbers * 2
    )
    # PowerSGD: 4 full steps, then P (n x 2) and Q (m x 2) for each matrix, the biases as they are.
    compressed = sum(2 * (a + b) for a, b in weights) + biases
    assert ddp["chars", "DDP PowerSGD rank 2"][2] == 2 * 4 * (4 * numbers + (steps - 4) * compressed)
    char_ddp_losses = [ddp["chars", run][1] for run in HOOKS]
    assert max(char_ddp_losses) < unigram - 0.3, (char_ddp_losses, unigram)

    assert (tmp_path / "precision_and_compression.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "\nDone: bfloat16, float16 and compressed gradients train as float32 does" in out
