"""``python -m nbcoll exercise``: the list, a starter copied into the learner's folder (never into the package,
never over a file without --force), --solution, and --check's exit status, also for a file that never finishes
(stopped at --timeout, naming the case) or that exits (sys.exit, SystemExit, os._exit) while imported or checked."""

import subprocess
import sys
from pathlib import Path

import pytest

from nbcoll import exercises
from nbcoll.__main__ import main

ROOT = Path(__file__).resolve().parent.parent


def test_without_a_name_lists_every_exercise(capsys):
    assert main(["exercise"]) == 0
    out = capsys.readouterr().out
    assert len(exercises.EXERCISES) >= 12
    for name in exercises.EXERCISES:
        assert name in out


def test_starter_is_copied_here_and_never_overwritten_without_force(tmp_path, monkeypatch, capsys):
    package_files = sorted(p.name for p in exercises.HERE.rglob("*"))
    monkeypatch.chdir(tmp_path)
    assert main(["exercise", "map_kernel"]) == 0
    copied = tmp_path / "map_kernel.py"
    assert copied.read_text() == exercises.get("map_kernel").starter.read_text()

    copied.write_text("# my work\n")
    assert main(["exercise", "map_kernel"]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert copied.read_text() == "# my work\n"

    assert main(["exercise", "map_kernel", "--force"]) == 0
    assert copied.read_text() == exercises.get("map_kernel").starter.read_text()
    assert sorted(p.name for p in exercises.HERE.rglob("*")) == package_files


def test_starter_is_never_written_into_the_package(capsys):
    assert main(["exercise", "ddp_buckets", "--dir", str(exercises.HERE / "starters"), "--force"]) == 2
    assert "inside the installed nbcoll package" in capsys.readouterr().err


def test_solution_prints_the_reference(capsys):
    assert main(["exercise", "ddp_buckets", "--solution"]) == 0
    assert capsys.readouterr().out == exercises.get("ddp_buckets").solution.read_text()


def test_mistakes_in_the_call_are_one_line(tmp_path, capsys):
    assert main(["exercise", "no_such_exercise"]) == 2
    assert "unknown name 'no_such_exercise'" in capsys.readouterr().err
    assert main(["exercise", "ddp_buckets", "--check", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_check_in_a_fresh_process_exit_status_and_report(tmp_path):
    def check(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "nbcoll", "exercise", "ddp_buckets", "--check", str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )

    passed = check(exercises.get("ddp_buckets").solution)
    assert passed.returncode == 0 and "ddp_buckets: all cases pass" in passed.stdout, passed.stdout + passed.stderr
    failed = check(exercises.get("ddp_buckets").starter)
    assert failed.returncode == 1 and "not written yet" in failed.stdout


def test_learner_file_that_does_not_import_is_reported(tmp_path):
    broken = tmp_path / "ddp_buckets.py"
    broken.write_text("def ddp_buckets(sizes, cap)\n    return []\n")
    report = exercises.check("ddp_buckets", broken)
    assert not report.passed and "does not import: SyntaxError" in report.format()
    renamed = tmp_path / "renamed.py"
    renamed.write_text("def buckets(sizes, cap):\n    return []\n")
    assert "defines no 'ddp_buckets'" in exercises.check("ddp_buckets", renamed).format()


def _cli_check(name: str, path: Path, *options: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m nbcoll exercise NAME --check PATH OPTIONS``, in a fresh process, bounded by ``timeout``."""
    command = [sys.executable, "-m", "nbcoll", "exercise", name, "--check", str(path), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=path.parent)


def test_check_stops_a_file_that_loops_while_being_imported(tmp_path):
    looping = tmp_path / "ddp_buckets.py"
    looping.write_text("while True:\n    pass\n")
    proc = _cli_check("ddp_buckets", looping, "--timeout", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  import" in proc.stdout and f"while importing {looping}" in proc.stdout, proc.stdout


LOOPING_KERNEL = """\
from numba import cuda


@cuda.jit
def axpb_kernel(x, out, a, b):
    i = cuda.grid(1)
    while x.size > 1:  # every input longer than one element: a loop that never ends
        pass
    if i < out.size:
        out[i] = a * x[i] + b
"""


def test_check_stops_a_kernel_that_never_finishes_and_names_its_case(tmp_path):
    looping = tmp_path / "map_kernel.py"
    looping.write_text(LOOPING_KERNEL)
    proc = _cli_check("map_kernel", looping, "--timeout", "4", "--no-ptx")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "PASS  n=1 (1 block of 32)" in proc.stdout and "FAIL  n=33 (2 blocks of 32)" in proc.stdout, proc.stdout
    assert "first failing case: n=33 (2 blocks of 32)" in proc.stdout and "did not finish within 4 s" in proc.stdout
    assert "map_kernel: 1 of 4 cases pass (2 not run: the check stops at the first failing case)" in proc.stdout


def test_timeout_must_be_positive(tmp_path, capsys):
    solution = exercises.get("ddp_buckets").solution
    with pytest.raises(SystemExit) as stopped:
        main(["exercise", "ddp_buckets", "--check", str(solution), "--timeout", "0"])
    assert stopped.value.code == 2 and "argument --timeout: expected seconds > 0, got '0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="timeout"):
        exercises.check("ddp_buckets", solution, timeout=-1)


EXITS = {
    "sys.exit()": "import sys\nsys.exit()\n",
    "sys.exit(0)": "import sys\nsys.exit(0)\n",
    "raise SystemExit": "raise SystemExit\n",
}


@pytest.mark.parametrize("how", EXITS)
def test_a_file_that_exits_while_being_imported_fails(tmp_path, how):
    exiting = tmp_path / "ddp_buckets.py"
    exiting.write_text(EXITS[how])
    report = exercises.check("ddp_buckets", exiting)
    assert not report.passed and report.first_failure.name == "import", report.format()
    assert f"{exiting} exited while being imported" in report.format()


@pytest.mark.parametrize("how", EXITS)
def test_a_function_that_exits_during_a_case_fails(tmp_path, how):
    exiting = tmp_path / "ddp_buckets.py"
    body = "".join(f"    {line}\n" for line in EXITS[how].splitlines())
    exiting.write_text(f"def ddp_buckets(sizes, cap):\n{body}")
    report = exercises.check("ddp_buckets", exiting)
    assert not report.passed and "exited the check during this case" in report.first_failure.detail, report.format()


def test_a_kernel_and_an_algorithm_that_exit_fail(tmp_path):
    kernel = tmp_path / "map_kernel.py"
    kernel.write_text(
        "import sys\nfrom numba import cuda\n\n\n@cuda.jit\ndef axpb_kernel(x, out, a, b):\n    sys.exit(0)\n"
    )
    report = exercises.check("map_kernel", kernel, ptx=False)
    assert report.first_failure.name == "n=1 (1 block of 32)", report.format()
    assert "exited the check during this case" in report.first_failure.detail
    algorithm = tmp_path / "ring_all_reduce.py"
    algorithm.write_text("import sys\n\n\ndef all_reduce(ctx, local, out):\n    sys.exit(0)\n    yield\n")
    report = exercises.check("ring_all_reduce", algorithm, trace_dir=None)
    assert not report.passed and "SystemExit" in report.format(), report.format()


def test_os_exit_is_reported_with_the_phase_it_ended(tmp_path):
    at_import = tmp_path / "ddp_buckets.py"
    at_import.write_text("import os\nos._exit(0)\n")
    proc = _cli_check("ddp_buckets", at_import)
    assert proc.returncode == 1 and f"{at_import} exited while being imported" in proc.stdout, proc.stdout
    in_case = tmp_path / "softmax_backward.py"
    in_case.write_text("import os\n\n\ndef softmax_backward(y, dy):\n    os._exit(0)\n")
    report = exercises.check("softmax_backward", in_case, timeout=60)
    assert report.first_failure.name == "y and dy of shape (1,)", report.format()
    assert "exited during this case (exit status 0)" in report.first_failure.detail
    exiting = tmp_path / "matmul_backward.py"
    exiting.write_text("import sys\nsys.exit(0)\n")
    proc = _cli_check("matmul_backward", exiting)
    assert proc.returncode == 1 and "exited while being imported" in proc.stdout, proc.stdout
