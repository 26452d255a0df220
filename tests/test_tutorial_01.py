"""Tutorial 01 runs, narrates what it shows, and its kernels are real CUDA (they compile to PTX for sm_90)."""

from pathlib import Path

import pytest
from helpers import compile_tutorial_kernels, run_python

TUTORIAL = Path(__file__).resolve().parent.parent / "tutorials" / "01_first_kernel.py"


@pytest.fixture(scope="module")
def sim_output(tmp_path_factory) -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NBCOLL_FIGURES_DIR", str(tmp_path_factory.mktemp("figures")))  # kept, as the docs build does
        proc = run_python([str(TUTORIAL)], "sim")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_tutorial_01_narrates_each_numbered_section(sim_output):
    assert sim_output.startswith("Tutorial 01 on the 'sim' backend")
    for section in range(1, 6):
        assert f"\n{section}. " in sim_output
    assert sim_output.rstrip().endswith("Done: every kernel matched NumPy.")


def test_tutorial_01_prints_each_thread_coordinates(sim_output):
    assert "blockIdx.x  threadIdx.x  blockDim.x  cuda.grid(1)  element" in sim_output
    rows = [line.split() for line in sim_output.splitlines() if line.startswith("   ") and "x[" in line]
    assert [row[:4] for row in rows] == [[str(i // 4), str(i % 4), "4", str(i)] for i in range(10)]
    assert sim_output.count("none: past the end") == 2
    # The same records drawn: one cell per thread, coloured by block, idle threads greyed.
    picture = Path(sim_output.split("the same as a picture: ", 1)[1].splitlines()[0])
    assert picture.name == "thread_map.png" and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tutorial_01_saxpy_matches_numpy(sim_output):
    assert "2. saxpy on 300 elements: 3 blocks x 128 threads" in sim_output
    assert "= 384 threads for 300 elements; 84 idle" in sim_output
    assert "saxpy matches NumPy" in sim_output


def test_tutorial_01_shows_the_simulator_catching_a_missing_bounds_check(sim_output):
    lines = sim_output.splitlines()
    at = next(i for i, line in enumerate(lines) if "IndexError" in line)
    assert "the simulator raised IndexError" in lines[at]
    line = lines[at + 1]  # the simulator's message, on a line of its own
    assert "ctaid=[2, 0, 0]" in line  # only the last block has threads past the end
    assert "out of bounds for axis 0 with size 300" in line


def test_tutorial_01_uses_nbcolls_launch_functions_and_prints_the_grid(sim_output):
    assert "unary('relu', x): 300 elements, matches unary_reference" in sim_output
    assert "saxpy from two launches, matches NumPy" in sim_output
    assert "blocks_for(300) = 2 blocks x 256 threads = 512 threads, 212 idle" in sim_output
    geometry = {int(row[0]): [int(v) for v in row[1:]] for row in _geometry_rows(sim_output)}
    assert geometry[256] == [1, 256, 0]
    assert geometry[257] == [2, 512, 255]


def _geometry_rows(output: str) -> list[list[str]]:
    after = output.split("n  blocks  threads  idle threads", 1)[1].splitlines()
    return [line.split() for line in after if len(line.split()) == 4]


def test_tutorial_01_moves_off_the_numpy_backend_and_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    # Without NBCOLL_FIGURES_DIR the picture goes to a temporary folder (in TMPDIR), removed when the run ends.
    monkeypatch.delenv("NBCOLL_FIGURES_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    proc = run_python([str(TUTORIAL)], "numpy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Tutorial 01 on the 'sim' backend" in proc.stdout
    assert "NBCOLL_BACKEND=numpy runs NumPy instead of kernels" in proc.stdout  # said, not silent
    assert f"the same as a picture: {tmp_path}" in proc.stdout and "(removed at the end" in proc.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == []


@pytest.mark.gpu
def test_tutorial_01_on_a_gpu_does_not_launch_the_unchecked_kernel():
    proc = run_python([str(TUTORIAL)], "cuda")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Tutorial 01 on the 'cuda' backend" in proc.stdout
    assert "not launched on a real GPU" in proc.stdout
    assert "saxpy matches NumPy" in proc.stdout


def test_tutorial_01_kernels_compile_to_ptx_for_sm90():
    proc = compile_tutorial_kernels(TUTORIAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "compiled 3" in proc.stdout, proc.stdout
