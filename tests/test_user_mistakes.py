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


# A real trace: a tree all-reduce and a ring broadcast on a loopback world of 4 ranks, with a FIFO small enough
# that the tree pipelines several chunks. The tree is the trace whose arrows used to run backwards.
TREE_CONFIG = {"buffsize": 256, "steps": 8, "timeout": 60.0}


@pytest.fixture(scope="module")
def tree_trace(tmp_path_factory):
    import numpy as np

    import nbcoll
    from nbcoll.comm import loopback
    from nbcoll.comm.config import CommConfig

    directory = tmp_path_factory.mktemp("tree") / "trace"
    directory.mkdir()

    def collectives(comm):
        comm.all_reduce(np.arange(96, dtype=np.float32) + comm.rank, algo="tree")
        comm.broadcast(np.arange(8, dtype=np.float32), root=0, algo="ring")

    with nbcoll.use_backend("numpy"):
        loopback.run(4, collectives, config=CommConfig(**TREE_CONFIG, trace=str(directory)))
    return directory


def test_every_arrow_of_a_tree_all_reduce_trace_points_forward(tree_trace):
    records = trace_view.load(tree_trace)
    assert {rec["algo"] for rec in records if rec["collective"] == "all_reduce"} == {"tree"}
    column = trace_view.columns(records)
    pairs = trace_view.arrows(records)
    assert len(pairs) > 12
    backwards = [(src, dst) for src, dst in pairs if column[id(dst)] <= column[id(src)]]
    assert not backwards, backwards[:3]


def _drawn_figure(monkeypatch, directory, output, **options):
    """Draw the trace and keep the matplotlib figure that ``draw`` closes, to look at what it shows."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    kept = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (kept.append(fig), close(fig)))
    trace_view.draw(directory, output, **options)
    [figure] = kept
    FigureCanvasAgg(figure).draw()  # closing detached it from its canvas; text extents need one
    return figure


def test_a_trace_picture_has_a_legend_whole_steps_and_labels_inside_their_boxes(tree_trace, tmp_path, monkeypatch):
    figure = _drawn_figure(monkeypatch, tree_trace, tmp_path / "tree.png", seq=1)
    [ax] = figure.axes
    steps = [rec for rec in trace_view.load(tree_trace) if rec["seq"] == 1]
    primitives = {rec["primitive"] for rec in steps}
    channels = {f"channel {rec['channel']}" for rec in steps}  # the two trees run at once, on channels 0 and 1
    legend = ax.get_legend()
    assert legend is not None and {text.get_text() for text in legend.get_texts()} == primitives | channels
    ticks = [tick for tick in ax.get_xticks() if 0 <= tick <= ax.get_xlim()[1]]
    assert ticks and all(float(tick).is_integer() for tick in ticks), ticks  # no step 0.5
    renderer = figure.canvas.get_renderer()
    to_data = ax.transData.inverted()
    labels = [text for text in ax.texts if text.get_text() and not text.get_text().startswith("#")]
    assert len(labels) == len([rec for rec in trace_view.load(tree_trace) if rec["seq"] == 1])
    for text in labels:
        box = text.get_window_extent(renderer).transformed(to_data)
        assert box.width <= 0.9 and abs(box.height) <= 0.6, (text.get_text(), box)  # a step's box is 0.9 x 0.6


def test_trace_view_without_seq_draws_each_collective_in_its_own_columns(tree_trace, tmp_path, monkeypatch):
    records = trace_view.load(tree_trace)
    column = trace_view.columns(records)
    for rank in range(4):
        mine = [rec for rec in records if rec["rank"] == rank]
        tree_end = max(column[id(rec)] for rec in mine if rec["seq"] == 1)
        assert min(column[id(rec)] for rec in mine if rec["seq"] == 2) > tree_end, rank  # after, not on top
        assert len({column[id(rec)] for rec in mine}) == len(mine), rank  # one box per column on each rank
    figure = _drawn_figure(monkeypatch, tree_trace, tmp_path / "all.png")
    shaded = {text.get_text() for text in figure.axes[0].texts if text.get_text().startswith("#")}
    assert shaded == {"#1", "#2"}


@pytest.mark.parametrize(
    "typed", ["all_reduce", "allreduce", "All-Reduce", "reduce_scatter", "reducescatter", "all_to_all"]
)
def test_nbcoll_algo_perf_and_estimate_accept_every_spelling_of_a_collective(typed):
    import nbcoll
    from nbcoll.comm.algorithms import parse_algo_setting
    from nbcoll.perf.__main__ import _collective_name

    name = _collective_name(typed)
    canonical = {"allreduce": "all_reduce", "All-Reduce": "all_reduce", "reducescatter": "reduce_scatter"}
    assert name == canonical.get(typed, typed)
    algo = next(iter(parse_algo_setting(None)[name]))
    assert parse_algo_setting(f"{typed}:{algo}")[name] == {algo}
    with nbcoll.use_backend("numpy"), nbcoll.comm.loopback(2) as world:  # threads of one process: not cuda
        assert world[0].estimate(typed, 1 << 10, algo=algo) == world[0].estimate(name, 1 << 10, algo=algo) > 0
        with pytest.raises(ValueError, match="collective: unknown 'allreduse'"):
            world[0].estimate("allreduse", 1 << 10)


def test_perf_takes_the_underscored_name_too():
    proc = _run(["-m", "nbcoll", "perf", "all_reduce", "-b", "8", "-e", "8", "-n", "1", "--backend", "numpy"])
    assert proc.returncode == 0, proc.stderr
    assert "all_reduce" in proc.stdout
