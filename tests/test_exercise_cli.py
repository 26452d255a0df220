"""``python -m nbcoll exercise``: the list, a starter copied into the learner's folder (never into the package,
never over a file without --force), --solution, and --check's exit status."""

import subprocess
import sys
from pathlib import Path

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
