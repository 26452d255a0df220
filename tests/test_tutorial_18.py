"""Tutorial 18 trains a graph convolution on the karate club: in full on numpy, one step on the simulator."""

import re

import pytest
from helpers import TUTORIALS, run_python

TUTORIAL = TUTORIALS / "18_graph_message_passing.py"


@pytest.fixture(scope="module", params=["numpy", "sim"])
def run(request, tmp_path_factory):
    figures = tmp_path_factory.mktemp(f"graph-{request.param}")
    # The simulator runs every kernel thread in Python: one training step there checks the kernels' path.
    epochs = [] if request.param == "numpy" else ["--epochs", "1"]
    proc = run_python([str(TUTORIAL), "--out", str(figures), *epochs], request.param, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return request.param, proc.stdout, figures


def test_every_section_runs_and_message_passing_equals_the_dense_product(run):
    backend, output, figures = run
    assert output.startswith(f"Tutorial 18 on the {backend!r} backend")
    for section in range(1, 7):
        assert f"\n{section}. " in output, section
    assert "34 members, 78 friendships -> 190 directed edges with the self loops" in output
    assert "node 2 receives [1.0, 11.0]" in output  # three messages added at one node
    assert "equal to the dense A @ x: True" in output
    assert "degree (with the self loop): member 0 17, member 33 18, member 11 2" in output
    assert "it is section 2 again: True" in output
    assert (figures / "karate_club_gcn.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "What to try next:" in output and output.rstrip().splitlines()[-1].startswith("Done: ")


def test_two_labels_predict_the_other_members_factions(run):
    backend, output, _ = run
    if backend != "numpy":
        pytest.skip("the simulator takes one training step only")
    losses = [float(v) for v in re.findall(r"epoch +\d+: loss ([\d.]+)", output)]
    assert losses[-1] < losses[0] / 5, losses
    accuracy = float(re.search(r"accuracy on the 32 unlabelled members: ([\d.]+)%", output).group(1))
    assert accuracy >= 90.0, output
