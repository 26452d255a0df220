"""run_ranks and launch: every rank's output, in rank order; failures and hangs reported with all of it."""

import ast
import glob
import mmap
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nbcoll import launch as launch_module
from nbcoll import launch_job
from nbcoll.launch import LaunchError, MPIRuntimeNotFound, RankResult, find_mpiexec, launch, relaunch, under_mpi
from nbcoll.testing import run_ranks

MPI_SCRIPTS = Path(__file__).parent / "mpi_scripts"
PRINT_RANK = MPI_SCRIPTS / "print_rank.py"

pytestmark = pytest.mark.mpi


def processes_mentioning(word: str) -> list[str]:
    """Command lines of the running processes that contain ``word``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if word in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_every_rank_output_is_collected_separately(nprocs):
    result = run_ranks(nprocs, PRINT_RANK, timeout=60)
    assert len(result.outputs) == nprocs
    for rank, output in enumerate(result.outputs):
        assert f"rank {rank} of {nprocs}" in output
        assert f"rank {rank} says something on stderr" in output
        assert all(f"rank {other} of" not in output for other in range(nprocs) if other != rank)
    assert result.statuses == [0] * nprocs


def test_code_runs_with_arguments_and_environment_overrides():
    code = "import os, sys; print(os.environ['NBCOLL_TEST_WORD'], sys.argv[1:], 'HOME' in os.environ)"
    result = run_ranks(2, None, "a", "b c", code=code, env={"NBCOLL_TEST_WORD": "hello", "HOME": None}, timeout=60)
    assert result.outputs == ["hello ['a', 'b c'] False\n"] * 2


def test_a_failing_rank_shows_every_rank_output_and_the_command():
    marker = f"fail{uuid.uuid4().hex[:12]}"
    with pytest.raises(AssertionError) as failure:
        run_ranks(3, PRINT_RANK, "--fail-rank", "1", "--marker", marker, timeout=60)
    assert processes_mentioning(marker) == []
    message = str(failure.value)
    for rank in range(3):
        assert f"----- rank {rank} (" in message
        assert f"rank {rank} of 3" in message
    assert "rank 1 fails on purpose" in message
    assert "----- rank 1 (exit status 3) -----" in message
    assert "mpiexec" in message and str(PRINT_RANK) in message


def test_an_exception_in_one_rank_ends_the_job_instead_of_hanging_it():
    # Rank 0 raises while rank 1 waits in a barrier: the launcher aborts the job, as `python -m mpi4py` does.
    code = (
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.rank == 0: raise ValueError('rank zero is broken')\n"
        "MPI.COMM_WORLD.Barrier()\n"
    )
    result = launch(2, code=code, timeout=60)
    assert not result.ok and not result.timed_out
    assert "ValueError: rank zero is broken" in result.outputs[0]
    assert result.statuses[0] == 1
    with pytest.raises(LaunchError, match="rank zero is broken"):
        result.check()


def test_a_hanging_rank_is_killed_at_the_timeout_and_no_process_is_left():
    marker = f"hang{uuid.uuid4().hex[:12]}"
    with pytest.raises(AssertionError) as failure:
        run_ranks(3, PRINT_RANK, "--hang-rank", "2", "--marker", marker, timeout=6)
    message = str(failure.value)
    assert "timed out after 6 s" in message
    assert "rank 2 hangs on purpose" in message
    assert "----- rank 2 (did not finish) -----" in message
    for rank in range(3):
        assert f"rank {rank} of 3" in message
    assert processes_mentioning(marker) == []


def test_launch_a_function_by_object_and_by_name(monkeypatch):
    monkeypatch.syspath_prepend(str(MPI_SCRIPTS))
    import rank_functions

    result = launch(3, function=rank_functions.rank_and_double, args=(21,), timeout=60).check()
    assert result.returns == [(0, 42), (1, 42), (2, 42)]
    result = launch(2, function="rank_functions:rank_and_double", args=("ab",), timeout=60).check()
    assert result.returns == [(0, "abab"), (1, "abab")]


def test_launch_a_function_of_the_main_script():
    completed = subprocess.run(
        [sys.executable, str(MPI_SCRIPTS / "launch_main_function.py")], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        "[{'rank': 0, 'total': 6}, {'rank': 1, 'total': 6}]",
        "['rank 0 got [1, 2, 3]\\n', 'rank 1 got [1, 2, 3]\\n']",
    ]


def test_launch_checks_its_arguments():
    with pytest.raises(ValueError, match="nprocs"):
        launch(0, PRINT_RANK)
    with pytest.raises(ValueError, match="exactly one"):
        launch(2, PRINT_RANK, code="pass")
    with pytest.raises(FileNotFoundError, match="script"):
        launch(2, MPI_SCRIPTS / "no_such_script.py")
    with pytest.raises(ValueError, match="top level"):
        launch(2, function=lambda: None)
    with pytest.raises(TypeError, match=r"args\[0\]"):
        launch(2, function="rank_functions:rank_and_double", args=(object(),))
    with pytest.raises(ValueError, match="timeout"):
        launch(2, PRINT_RANK, timeout=0)
    with pytest.raises(ValueError, match=r"bind_to: expected None or one of .*'core'.*got 'cores'"):
        launch(2, PRINT_RANK, bind_to="cores")


def test_bind_to_core_pins_each_rank_to_one_core_in_turn():
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    cores = sorted(os.sched_getaffinity(0))
    bound = launch(3, code=code, bind_to="core", timeout=60)
    assert bound.ok, bound.report()
    pinned = [ast.literal_eval(output) for output in bound.outputs]
    assert all(len(cpus) == 1 and cpus[0] in cores for cpus in pinned), pinned
    assert pinned[0] != pinned[1] or len(cores) == 1  # in turn: the first two ranks on two cores
    assert "bind" in " ".join(bound.command)  # the command that reproduces the run says so
    free = launch(2, code=code, bind_to="none", timeout=60)
    assert free.ok and all(ast.literal_eval(output) == cores for output in free.outputs), free.report()


def test_relaunch_prints_each_rank_in_rank_order_and_exits_with_the_job_status():
    completed = subprocess.run(
        [sys.executable, str(MPI_SCRIPTS / "relaunch_demo.py"), "3"], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    expected = "".join(f"[rank {rank}]\nfirst line of rank {rank}\nsecond line of rank {rank}\n" for rank in range(3))
    assert completed.stdout == expected

    failed = subprocess.run(
        [sys.executable, str(MPI_SCRIPTS / "relaunch_demo.py"), "2", "5"], capture_output=True, text=True, timeout=120
    )
    assert failed.returncode == 5
    assert failed.stdout.index("[rank 0]") < failed.stdout.index("first line of rank 0")
    assert "rank 1 exited with 5" in failed.stderr


def test_relaunch_returns_at_once_inside_a_rank(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "0")
    assert under_mpi()
    assert relaunch(4) is None


def test_command_line_runs_a_script_on_n_ranks():
    completed = subprocess.run(
        [sys.executable, "-m", "nbcoll.launch", "-n", "2", str(PRINT_RANK)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.index("[rank 0]") < completed.stdout.index("rank 0 of 2")
    assert completed.stdout.index("rank 0 of 2") < completed.stdout.index("[rank 1]")
    assert completed.stdout.index("[rank 1]") < completed.stdout.index("rank 1 of 2")


def test_mpiexec_is_found_beside_the_interpreter_first(monkeypatch, tmp_path):
    monkeypatch.delenv("NBCOLL_MPIEXEC", raising=False)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "mpiexec").write_text("#!/bin/sh\n")
    (fake_bin / "mpiexec").chmod(0o755)
    monkeypatch.setattr(launch_module.sys, "executable", str(fake_bin / "python"))
    assert find_mpiexec() == str(fake_bin / "mpiexec")


def test_no_mpi_runtime_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("NBCOLL_MPIEXEC", raising=False)
    monkeypatch.setattr(launch_module.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MPIRuntimeNotFound, match=r"install the 'mpi' extra \(pip install -e '\.\[mpi\]'\)"):
        find_mpiexec()
    with pytest.raises(MPIRuntimeNotFound):
        run_ranks(2, PRINT_RANK)


def test_rank_environment_drops_an_enclosing_job(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
    environ = launch_module._rank_environment({"EXTRA": "1"})
    assert "PMI_RANK" not in environ and "OMPI_COMM_WORLD_SIZE" not in environ
    assert environ["EXTRA"] == "1" and environ["PYTHONUNBUFFERED"] == "1"
    assert os.environ["PMI_RANK"] == "3"


def test_a_rank_that_printed_nothing_says_so_in_rank_order():
    result = RankResult(nprocs=3, command=[], returncode=0, outputs=["narration\n", "", "no newline"], statuses=[0] * 3)
    silent = "(printed nothing: it ran the same script silently and exited with status 0)"
    assert result.in_rank_order() == f"[rank 0]\nnarration\n[rank 1]\n{silent}\n[rank 2]\nno newline\n"


def _unmapped_mpi_segments_since(since: float, settle_seconds: float = 5.0) -> list[str]:
    # Jobs of other test workers share /dev/shm: for a moment one may hold a file it has made and not yet mapped,
    # or one its launcher is about to remove. Such a file is gone or mapped within a few seconds; one the job
    # under test left behind stays unmapped.
    deadline = time.monotonic() + settle_seconds
    while True:
        made = [path for path in glob.glob(launch_job.MPI_SEGMENTS) if launch_job._modified_since(path, since)]
        mapped = launch_job._mapped_files()
        left = [path for path in made if path not in mapped]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


@pytest.mark.parametrize(("ending", "status"), [("if MPI.COMM_WORLD.rank == 1: os._exit(3)", 3), ("os._exit(0)", 0)])
def test_ranks_that_skip_mpi_finalize_leave_no_mpi_shared_memory_behind(ending, status):
    # A rank that dies, and ranks that end with os._exit(0) because a peer is gone (as the fault tests' do)
    started = time.time()
    code = f"import os\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n{ending}\nMPI.COMM_WORLD.Barrier()\n"
    result = launch(2, code=code, timeout=30)
    assert result.returncode == status, result.report()
    assert _unmapped_mpi_segments_since(started) == []


def test_the_cleanup_removes_only_new_files_that_no_process_maps(tmp_path):
    word = f"/dev/shm/nbcoll_test_{uuid.uuid4().hex[:8]}"
    orphan, in_use, old = (f"{word}_{name}" for name in ("orphan", "in_use", "old"))
    for path in (orphan, in_use, old):
        Path(path).write_bytes(b"\0" * 4096)
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # an hour old: made before the job started
    with open(in_use, "r+b") as file, mmap.mmap(file.fileno(), 4096) as mapping:
        try:
            removed = launch_job.remove_orphaned_mpi_segments(time.time() - 60, pattern=f"{word}_*")
            assert mapping[0] == 0
        finally:
            for path in (orphan, in_use, old):
                Path(path).unlink(missing_ok=True)
    assert removed == [orphan]
