"""Tutorial 11 runs, derives the gradients by hand, and finds the engine's gradients equal to them."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parent.parent / "tutorials" / "11_autograd_from_scratch.py"


def _run(backend: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = backend
    return subprocess.run([sys.executable, str(TUTORIAL)], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", params=["sim", "numpy"])
def output(request) -> str:
    proc = _run(request.param)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"Tutorial 11 on the {request.param!r} backend")
    return proc.stdout


def test_tutorial_11_narrates_each_numbered_section(output):
    for section in range(1, 6):
        assert f"\n{section}. " in output
    assert output.rstrip().endswith("Done: the engine's gradients match the chain rule by hand and finite differences.")


def test_tutorial_11_prints_each_local_derivative_by_hand(output):
    for name in ("dL/dy", "dL/db2", "dL/dw2[0]", "dL/dh_1", "dL/dz_0", "dL/db1[1]", "dL/dW1[1,0]"):
        assert re.search(rf"^   {re.escape(name)} +=", output, re.MULTILINE), name
    assert "(1 - h_0^2 = " in output


def test_tutorial_11_compares_every_parameter_with_the_engine(output):
    rows = [line.split() for line in output.splitlines() if re.match(r"^   (b2|w2|b1|W1)[\[ ]", line)]
    assert len(rows) == 1 + 2 + 2 + 4
    for row in rows:
        assert row[-2] == row[-1], row  # by hand and by the engine, printed to 8 decimals
    assert "every gradient matches the chain rule by hand" in output
    assert "hook on h: dL/dh = [" in output
    assert "gradcheck(network, [W1, b1, w2, b2]) = True" in output


def test_tutorial_11_shows_the_recorded_graph(output):
    graph = output.split("3. The graph nbcoll records", 1)[1].split("4. ", 1)[0]
    for node in ("<Pow node>", "<Sub node>", "<MatMul node>", "<Tanh node>", "leaf W1", "leaf b2"):
        assert node in graph, node
    # The output's node comes first, the leaves last.
    assert graph.index("<Pow node>") < graph.index("<Tanh node>") < graph.index("leaf W1")
