"""A user's mistakes end in one clear line, and nothing surprising happens silently.

Each test runs the command a user would type, in a fresh process, and reads what it prints.
"""

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

from nbcoll.comm import trace_view
from nbcoll.perf.__main__ import default_backend


def _run(args: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NBCOLL_BACKEND", "NUMBA_ENABLE_CUDASIM")}
    full_env.update(env)
    for name in [k for k in full_env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM_WORLD_", "NBCOLL_LAUNCHED"))]:
        del full_env[name]  # as a user's shell: not inside an MPI job
    return subprocess.run(
        [sys.executable, *args], env=full_env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_an_unknown_backend_is_one_line():
    line = _one_error_line(_run(["-m", "nbcoll", "info"], NBCOLL_BACKEND="gpu"))
    assert line.startswith("nbcoll info: error: NBCOLL_BACKEND: unknown backend 'gpu'")
    assert "cuda, sim, numpy" in line


def test_trace_view_of_a_missing_directory_is_one_line(tmp_path):
    line = _one_error_line(_run(["-m", "nbcoll", "trace", "view", str(tmp_path / "nothing")]))
    assert line.startswith("nbcoll trace: error: directory: no rank*.jsonl trace files")


def _record(rank, seq, step, primitive, send=(), recv=(), t0=0.0, collective="reduce"):
    return {
        "rank": rank,
        "seq": seq,
        "collective": collective,
        "algo": "tree",
        "step": step,
        "primitive": primitive,
        "send": list(send),
        "recv": list(recv),
        "span": [0, 4],
        "bytes": 16,
        "t0": t0,
        "t1": t0 + 0.001,
    }


# A reduce up a chain 2 -> 1 -> 0: every rank's own step 0, so step numbers alone would draw arrows straight
# down or backwards; then a second collective, so that an unknown --seq has something to list.
CHAIN = [
    _record(2, 1, 0, "send", send=[1], t0=0.0),
    _record(1, 1, 0, "recv_reduce_send", recv=[2], send=[0], t0=0.1),
    _record(0, 1, 0, "recv_reduce_copy", recv=[1], t0=0.2),
    _record(0, 2, 0, "send", send=[1], t0=0.3, collective="broadcast"),
    _record(1, 2, 0, "recv", recv=[0], t0=0.4, collective="broadcast"),
]


def _write_trace(directory, records):
    directory.mkdir()
    for rank in {r["rank"] for r in records}:
        lines = [json.dumps(r) for r in records if r["rank"] == rank]
        (directory / f"rank{rank}.jsonl").write_text("\n".join(lines) + "\n")


def test_trace_view_of_an_unknown_seq_lists_the_collectives_it_holds(tmp_path):
    _write_trace(tmp_path / "trace", CHAIN)
    line = _one_error_line(_run(["-m", "nbcoll", "trace", "view", str(tmp_path / "trace"), "--seq", "9"]))
    assert "no collective #9" in line and "1 (reduce), 2 (broadcast)" in line


def test_every_arrow_of_a_trace_points_forward():
    column = trace_view.columns(CHAIN)
    pairs = trace_view.arrows(CHAIN)
    assert len(pairs) == 3
    for src, dst in pairs:
        assert column[id(dst)] > column[id(src)], (src, dst)
    assert [column[id(r)] for r in CHAIN] == [0, 1, 2, 3, 4]


def test_trace_view_draws_every_collective_apart(tmp_path):
    pytest.importorskip("matplotlib")
    _write_trace(tmp_path / "trace", CHAIN)
    out = trace_view.draw(tmp_path / "trace", tmp_path / "trace.png")
    assert out.stat().st_size > 0


def test_long_primitive_names_are_wrapped_to_fit_their_box():
    assert trace_view._label("recv_reduce_copy_send") == "recv_reduce\ncopy_send"
    assert trace_view._label("send") == "send"


def test_perf_is_a_subcommand_runs_on_numpy_without_a_gpu_and_prints_the_command_that_ran():
    proc = _run(["-m", "nbcoll", "perf", "allreduce", "-b", "8", "-e", "64", "-f", "8", "-n", "1", "-w", "0"])
    assert proc.returncode == 0, proc.stderr
    if default_backend(None, {}) == "numpy":
        assert "backend numpy" in proc.stdout
    assert "# command: python -m nbcoll.perf allreduce" in proc.stdout
    assert "mpiexec -n 1" not in proc.stdout
    assert "# note: one rank" in proc.stdout


def test_perf_honours_an_explicit_backend_and_nbcoll_backend():
    assert default_backend("sim", {}) == "sim"
    import nbcoll

    # NBCOLL_BACKEND was read when nbcoll was imported: perf then runs on whatever the process runs on.
    assert default_backend(None, {"NBCOLL_BACKEND": "sim"}) == nbcoll.get_backend()


def test_a_collective_script_outside_mpiexec_warns_that_it_is_one_rank():
    code = "import nbcoll; c = nbcoll.init(); print(c.size); c.destroy()"
    proc = _run(["-c", code], NBCOLL_BACKEND="numpy")
    assert proc.returncode == 0, proc.stderr
    assert "SingleRankWarning" in proc.stderr and "mpiexec -n 4" in proc.stderr


def test_no_single_rank_warning_under_mpiexec():
    from nbcoll.testing import run_ranks

    result = run_ranks(1, code="import nbcoll; c = nbcoll.init(); c.destroy(); print('done')")
    assert "SingleRankWarning" not in result.outputs[0]
