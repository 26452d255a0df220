"""The scripts of ``benchmarks/lab`` (one trick each) run end to end at tiny sizes, every result exact; what they
measure is told in ``benchmarks/lab/NOTES.md`` and never asserted."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nbcoll.kernels import stream_copy

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "benchmarks" / "lab"


def _run(args, env=None, timeout=600):
    environ = dict(os.environ, **(env or {}))
    environ["PYTHONPATH"] = str(ROOT) + os.pathsep + environ.get("PYTHONPATH", "")
    return subprocess.run(args, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=timeout)


def test_memory_copies_times_every_way_to_copy_at_a_tiny_size(tmp_path):
    done = _run([sys.executable, str(LAB / "memory_copies.py"), "--sizes", "1", "--repeats", "2",
                 "--out", str(tmp_path)])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "memory_copies.json").read_text())
    (row,) = record["results"]
    assert row["nbytes"] == 1 << 20
    assert set(row["seconds"]) == {"private", "shared", "shared_chunks", "two_halves"}
    assert all(seconds > 0 for seconds in row["seconds"].values())
    assert "two processes, half each (ms)" in (tmp_path / "memory_copies.rst").read_text()


def test_shared_lines_times_each_way_to_write_into_lines_a_reader_read(tmp_path):
    done = _run([sys.executable, str(LAB / "shared_lines.py"), "--bytes", "64K", "--rounds", "12",
                 "--out", str(tmp_path)])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "shared_lines.rst").read_text()
    assert "differ from the writer's bytes: 0" in text and "--bytes 64K --rounds 12" in text, text
    ways = ("ordinary", "streaming", "unread") if stream_copy.available() else ("ordinary", "unread")
    for way in ways:  # the writer's median, and the reader's after it (none after a write nobody reads)
        reader = "-" if way == "unread" else "[0-9.]+"
        assert re.search(rf"   \* - {way}\n     - [0-9.]+\n     - {reader}\n", text), text


@pytest.mark.mpi
def test_ll_compiled_times_both_paths_beside_mpi_with_exact_results(tmp_path):
    script = str(LAB / "ll_compiled.py")
    done = _run([sys.executable, script, "--quick", "--ranks", "2", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in (tmp_path / "ll_compiled_2ranks_quick.txt").read_text().splitlines()]
    table = [row for row in rows if row and row[0] in ("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                                       "all_to_all")]  # fmt: skip
    assert len(table) == 10 and all(row[-1] == "yes" for row in table), rows  # 5 collectives x 2 sizes, all exact
    assert all(float(row[2]) > 0 and float(row[3]) > 0 and float(row[5]) > 0 for row in table), rows


@pytest.mark.mpi
def test_windows_benchmark_compares_two_window_sizes_with_exact_results(tmp_path):
    done = _run([sys.executable, str(LAB / "windows.py"), "--ranks", "4", "--sizes", "1M", "--repeats", "1",
                 "--out", str(tmp_path)])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "windows_4ranks.rst").read_text()
    assert "window 4 MiB" in text and "window 8 MiB" in text  # 4 ranks: the default window is two buffsizes
    assert "results that differ from the exact ones: 0" in text
    assert text.count("   * - all_to_all") == 2 and text.count("   * - reduce_scatter") == 2


PIECES = [("broadcast", ("1 MiB", "4 MiB")), ("all_gather", ("1 MiB", "2 MiB"))]  # at 3 ranks


@pytest.mark.mpi
@pytest.mark.parametrize("collective, pieces", PIECES)
def test_one_shot_pieces_benchmark_compares_two_piece_sizes_with_exact_results(tmp_path, collective, pieces):
    done = _run([sys.executable, str(LAB / "one_shot_pieces.py"), "--collective", collective, "--ranks", "3",
                 "--sizes", "6M", "--repeats", "1", "--out", str(tmp_path)])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / f"{collective}_pieces_3ranks.rst").read_text()
    assert f"pieces of {pieces[0]}" in text and f"pieces of {pieces[1]}" in text
    assert "results that differ from the exact ones: 0" in text
    assert f"--collective {collective} --sizes 6M" in text
    assert text.count("   * - registered") == 1 and text.count("   * - plain") == 1


@pytest.mark.mpi
def test_channels_benchmark_times_one_and_two_channels_in_one_launch(tmp_path):
    done = _run([sys.executable, str(LAB / "channels.py"), "--ranks", "2", "--sizes", "8", "--repeats", "1",
                 "--out", str(tmp_path)])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "channels_2ranks.rst").read_text()
    assert "python benchmarks/lab/channels.py --sizes 8 --repeats 1 (mpiexec -n 2)" in text
    for algo in ("tree", "ring"):
        assert f"{algo}, 1 channel" in text and f"{algo}, 2 channels" in text
    assert re.search(r"   \* - 8\n(     - [0-9.]+x?\n){6}", text)  # one row: three cells per algorithm


@pytest.mark.parametrize(
    "script, collectives, row",
    [  # a row: per collective (and work before) the cells of the contenders and their ratios
        ("stream_copy", ("all_gather", "broadcast", "all_to_all"), r"(     - [0-9.]+\n){6}"),
        ("cross_memory", ("all_to_all", "all_gather", "broadcast"), r"(     - [0-9.]+\n){6}"),
        ("stream_shared", ("broadcast", "all_gather", "all_reduce", "broadcast ring", "all_reduce ring"),
         r"(     - [0-9.]+\n){6}"),
        ("first_call", ("all_gather", "broadcast", "all_to_all"),
         r"     - (same|other|compute|memory)\n(     - [0-9.]+\n){8}"),
    ],
)  # fmt: skip
def test_same_run_benchmark_beside_mpi_in_one_launch(tmp_path, script, collectives, row):
    # 256 KiB: above the LL protocol's 64 KiB, so every collective takes the windows
    done = _run([sys.executable, str(LAB / f"{script}.py"), "--ranks", "3", "--sizes", "256K",
                 "--repeats", "1", "--out", str(tmp_path)])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / f"{script}_3ranks.rst").read_text()
    assert f"python benchmarks/lab/{script}.py --sizes 256K --repeats 1 (mpiexec -n 3)" in text
    assert "results that differ from the exact ones: 0" in text
    rows = 4 if script == "first_call" else 1  # first_call: one row per kind of work before
    for collective in collectives:
        found = re.findall(rf"   \* - {collective}\n     - 262144\n{row}", text)
        assert len(found) == rows, text


def test_a_lab_scripts_tables_name_the_command_that_runs_it():
    """``report.script_path``: the caption and command of a table written by a lab script name its path under
    ``benchmarks/lab``, so that the stored command runs as it is."""
    spec = importlib.util.spec_from_file_location("report", LAB.parent / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    assert report.script_path(LAB / "channels.py") == "benchmarks/lab/channels.py"
    assert report.script_path(LAB.parent / "vs_mpi.py") == "benchmarks/vs_mpi.py"
    assert report.same_run_caption(str(LAB / "windows.py"), 2, "int32", "")[0].startswith(
        ".. generated by benchmarks/lab/windows.py;"
    )
