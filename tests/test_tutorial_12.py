"""Tutorial 12 trains its four models: full sizes on numpy (the digits MLP reaches 95%), toy sizes on the simulator."""

import re

import pytest
from helpers import TUTORIALS, run_python

TUTORIAL = TUTORIALS / "12_training.py"
CURVES = ("linear.png", "classifier.png", "digits_mlp.png", "char_lstm.png")


@pytest.fixture(scope="module", params=["numpy", "sim"])
def run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"training-{request.param}")
    proc = run_python([str(TUTORIAL), "--out", str(out)], request.param, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.startswith(f"Tutorial 12 on the {request.param!r} backend")
    return request.param, proc.stdout, out


def test_every_section_runs_and_draws_its_loss_curve(run):
    _, output, out = run
    for section in range(1, 5):
        assert f"\n{section}. " in output
    for name in CURVES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"loss curve: {out / name}" in output
    assert output.rstrip().splitlines()[-1].startswith("Done: four models trained")


def test_the_checkpoint_reloads_into_an_identical_model(run):
    _, output, out = run
    assert (out / "digits_mlp.npz").exists()
    assert "(same: True)" in output


def test_full_sizes_learn(run):
    backend, output, _ = run
    if backend != "numpy":
        pytest.skip("the simulator trains toy sizes for a step or two")
    accuracy = float(re.search(r"test accuracy: ([\d.]+)%", output).group(1))
    assert accuracy >= 95.0, output
    slope, intercept = map(float, re.search(r"learned y = ([-\d.]+) x ([-+\d.]+)", output).groups())
    assert abs(slope - 3) < 0.2 and abs(intercept + 2) < 0.2
    first, last = map(float, re.search(r"cross-entropy ([\d.]+) -> ([\d.]+) nats", output).groups())
    assert last < first - 1.0  # the LSTM learned which characters follow which
