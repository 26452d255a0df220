"""The perf tool: busbw factors, size sweeps, exact inputs, and nccl-tests' table printed by real runs."""

import json
import textwrap

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import combine
from nbcoll.launch import launch
from nbcoll.perf import bandwidth, exact, table
from nbcoll.perf.__main__ import build_parser, options_from

COLUMNS = "size count type redop root time algbw busbw #wrong time algbw busbw #wrong".split()


@pytest.mark.parametrize(
    "collective, factor",
    [
        ("all_reduce", lambda n: 2 * (n - 1) / n),
        ("all_gather", lambda n: (n - 1) / n),
        ("reduce_scatter", lambda n: (n - 1) / n),
        ("all_to_all", lambda n: (n - 1) / n),
        ("gather", lambda n: (n - 1) / n),
        ("scatter", lambda n: (n - 1) / n),
        ("broadcast", lambda n: 1.0),
        ("reduce", lambda n: 1.0),
        ("sendrecv", lambda n: 1.0),
    ],
)
def test_bus_factors_are_nccl_tests(collective, factor):
    for n in (1, 2, 3, 4, 8):
        assert bandwidth.bus_factor(collective, n) == pytest.approx(factor(n))


def test_blocked_collectives_count_every_rank_in_the_size():
    f32 = np.dtype(np.float32)
    assert bandwidth.block_count("all_gather", 1024, f32, 4) == 64
    assert bandwidth.total_bytes("all_gather", 64, f32, 4) == 1024
    assert bandwidth.block_count("all_reduce", 1024, f32, 4) == 256
    assert bandwidth.block_count("all_gather", 40, f32, 4) == 2  # rounded down to whole blocks
    algbw, busbw = bandwidth.bandwidths("all_reduce", 10**9, 2.0, 4)
    assert (algbw, busbw) == (0.5, 0.75)


def test_sizes_parse_and_sweep_as_nccl_tests():
    assert bandwidth.parse_size("8") == 8
    assert bandwidth.parse_size("64K") == 64 << 10
    assert bandwidth.parse_size("8M") == 8 << 20
    assert bandwidth.parse_size("1G") == 1 << 30
    assert bandwidth.size_sweep(8, 8 << 20, 4) == [8 * 4**k for k in range(11)]
    assert bandwidth.size_sweep(100, 400, step_bytes=100) == [100, 200, 300, 400]
    with pytest.raises(ValueError, match="-e"):
        bandwidth.size_sweep(16, 8, 2)
    with pytest.raises(ValueError, match="size"):
        bandwidth.parse_size("eight")


@pytest.mark.parametrize("op", exact.OPS)
@pytest.mark.parametrize("dtype", nbcoll.DTYPES, ids=str)
def test_expected_results_do_not_depend_on_the_reduction_order(op, dtype):
    n, count = 5, 3 * exact.PERIOD + 7
    inputs = [exact.rank_input(r, op, dtype, 0, count) for r in range(n)]
    if op == "premul_sum":
        inputs = [combine.scale_reference(x, exact.PREMUL_SCALAR) for x in inputs]
    fold = combine.kernel_op(exact.make_op(op))
    for order in ([4, 2, 0, 3, 1], [1, 3, 0, 4, 2]):
        acc = inputs[order[0]]
        for r in order[1:]:
            acc = combine.combine_reference(fold, acc, inputs[r])
        if op == "avg":
            acc = combine.divide_reference(acc, n)
        assert exact.count_wrong(acc, exact.reduced_values(op, dtype, n, 0, count)) == 0
    # a window that starts mid-pattern is the same slice of the full result
    full = exact.reduced_values(op, dtype, n, 0, count)
    np.testing.assert_array_equal(exact.reduced_values(op, dtype, n, 70, 20), full[70:90])


def test_count_wrong_counts_elements():
    assert exact.count_wrong(np.array([1.0, 2.0, np.nan]), np.array([1.0, 3.0, 3.0])) == 2


def test_table_header_has_nccl_tests_columns():
    names = table.header().splitlines()[1].lstrip("#").split()
    assert names == COLUMNS
    m = table.Measurement(1e-3, 1.0, 1.5, 0)
    line = table.row(table.Row("all_reduce", "ring", 8, 2, "float32", "sum", -1, m, None))
    assert line.split() == ["8", "2", "float", "sum", "-1", "1000.00", "1.00", "1.50", "0", "N/A", "N/A", "N/A", "N/A"]
    assert "Avg bus bandwidth" in table.footer([table.Row("x", "a", 8, 2, "float32", "sum", -1, m, m)])


def test_options_are_checked_with_clear_errors():
    parse = build_parser().parse_args
    with pytest.raises(ValueError, match="-o"):
        options_from(parse(["all_reduce", "-o", "median"]))
    with pytest.raises(ValueError, match="algo"):
        options_from(parse(["all_gather", "--algo", "tree"]))
    with pytest.raises(ValueError, match="-a"):
        options_from(parse(["all_reduce", "-a", "mean"]))
    options = options_from(parse(["all_reduce", "-b", "8", "-e", "8M", "-f", "4", "-d", "all", "-a", "3"]))
    assert len(options.sizes) == 11 and len(options.dtypes) == len(nbcoll.DTYPES) and options.average == "max"
    assert options_from(parse(["all_gather", "--algo", "all"])).algos == ["ring", "direct"]


def _rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip() and not line.startswith("#")]


def _perf(nprocs, backend, command, tmp_path):
    """Run ``python -m nbcoll.perf command`` on ``nprocs`` ranks; return rank 0's output and the JSON report."""
    report = tmp_path / "perf.json"
    code = "import sys; from nbcoll.perf.__main__ import main; sys.exit(main(sys.argv[1:]))"
    args = [*command.split(), "-J", str(report)]
    result = launch(nprocs, code=code, args=args, env={"NBCOLL_BACKEND": backend}, timeout=300)
    assert result.ok, result.report()
    return result.outputs[0], json.loads(report.read_text())


def _check_report(output, report, collective, nranks, sizes):
    header = [line for line in output.splitlines() if line.startswith("#") and "redop" in line]
    assert header and header[0].lstrip("#").split() == COLUMNS, output
    rows = _rows(output)
    assert len(rows) == sizes, output
    for fields in rows:
        assert len(fields) == len(COLUMNS), fields
        assert fields[8] == "0", output  # out-of-place #wrong
        assert fields[12] in ("0", "N/A"), output
    assert "# Avg bus bandwidth" in output
    factor = bandwidth.bus_factor(collective, nranks)
    assert report["bus_factor"] == pytest.approx(factor) and report["wrong"] == 0
    for row in report["rows"]:
        for m in (row["out_of_place"], row["in_place"]):
            if m is not None and m["algbw"] > 0:
                assert m["busbw"] / m["algbw"] == pytest.approx(factor)
                assert m["algbw"] == pytest.approx(row["nbytes"] / m["seconds"] / 1e9)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_all_reduce_table_on_numpy(nprocs, tmp_path):
    output, report = _perf(nprocs, "numpy", "all_reduce -b 8 -e 8K -f 4 -n 2 -w 1", tmp_path)
    _check_report(output, report, "all_reduce", nprocs, 6)


@pytest.mark.mpi
def test_every_collective_and_algorithm_on_three_numpy_ranks(tmp_path):
    # One launch runs the tool once per collective (a launch costs more than a sweep this small)
    code = textwrap.dedent(
        """
        import sys
        from nbcoll.perf.__main__ import main
        for collective in sys.argv[2:]:
            print("=== " + collective, flush=True)
            args = "-b 4 -e 4K -f 16 -n 1 -w 0 --algo all -r 2".split()
            status = main([collective, *args, "-J", f"{sys.argv[1]}/{collective}.json"])
            if status:
                sys.exit(status)
        """
    )
    result = launch(3, code=code, args=[str(tmp_path), *bandwidth.COLLECTIVES], env={"NBCOLL_BACKEND": "numpy"},
                    timeout=300)  # fmt: skip
    assert result.ok, result.report()
    named = [part.partition("\n") for part in result.outputs[0].split("=== ")[1:]]  # (collective, _, output)
    assert [name for name, _, _ in named] == list(bandwidth.COLLECTIVES)
    for collective, _, output in named:
        report = json.loads((tmp_path / f"{collective}.json").read_text())
        algos = len({row["algo"] for row in report["rows"]})
        _check_report(output, report, collective, 3, 3 * algos)


@pytest.mark.mpi
def test_every_op_and_dtype_is_exact_on_numpy(tmp_path):
    output, report = _perf(2, "numpy", "all_reduce -b 4K -e 4K -n 1 -w 0 -o all -d all --algo all", tmp_path)
    _check_report(output, report, "all_reduce", 2, len(exact.OPS) * len(nbcoll.DTYPES) * 4)
    progress = [line for line in output.splitlines() if line.startswith("# [")]
    assert 5 <= len(progress) <= 9 and "% " in progress[0] and "s left" in progress[0], output  # a long sweep


@pytest.mark.mpi
@pytest.mark.parametrize("collective", ["all_reduce", "all_gather"])
def test_tiny_sizes_on_the_simulator(collective, tmp_path):
    output, report = _perf(2, "sim", f"{collective} -b 8 -e 128 -f 16 -n 1 -w 0", tmp_path)
    assert report["backend"] == "sim"
    _check_report(output, report, collective, 2, 2)


@pytest.mark.mpi
def test_the_json_report_grows_row_by_row_so_a_killed_sweep_leaves_its_rows(tmp_path):
    report = tmp_path / "perf.json"
    # The rank dies at once (as under SIGKILL) right after its second row is shown.
    code = textwrap.dedent(
        """
        import os, sys
        import nbcoll.perf.__main__ as perf

        def run(comm, world, options, on_row):
            shown = []
            def show_then_die(row, algo):
                on_row(row, algo)
                shown.append(row)
                if len(shown) == 2:
                    os._exit(9)
            return real_run(comm, world, options, on_row=show_then_die)

        real_run, perf.run = perf.run, run
        sys.exit(perf.main(sys.argv[1:]))
        """
    )
    args = ["all_reduce", "-b", "8", "-e", "8K", "-f", "4", "-n", "1", "-w", "0", "-J", str(report)]
    result = launch(1, code=code, args=args, env={"NBCOLL_BACKEND": "numpy"}, timeout=120)
    assert not result.ok, result.report()
    partial = json.loads(report.read_text())
    assert partial["complete"] is False and [row["nbytes"] for row in partial["rows"]] == [8, 32]


SMALL_SWEEP = ["all_reduce", "-b", "8", "-e", "64", "-f", "8", "-n", "1", "-w", "0", "--backend", "numpy"]


def _perf_here(argv: list[str]) -> int:
    """The perf tool on one rank, in this process (no launcher: a world of one)."""
    from nbcoll.perf.__main__ import main

    with nbcoll.use_backend("numpy"):
        return main([*SMALL_SWEEP, *argv])


@pytest.mark.parametrize("option", ["-J", "--plot"])
def test_output_paths_that_cannot_be_written_are_refused_before_any_work(option, tmp_path, capsys, monkeypatch):
    import nbcoll.perf.__main__ as perf

    def no_work(*args, **kwargs):
        raise AssertionError("the sweep ran although its output cannot be written")

    monkeypatch.setattr(perf, "run", no_work)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for path, why in [
        (tmp_path / "missing" / "out", "does not exist"),
        (a_file / "out", "is not a directory"),
        (tmp_path, "is a directory"),
    ]:
        assert _perf_here([option, str(path)]) == 2
        out, err = capsys.readouterr()
        assert f"nbcoll.perf: {option}: cannot write {path}:" in err and why in err, err
        assert "redop" not in out  # not even the table's header


def test_a_write_that_fails_at_the_end_still_shows_the_table_and_names_the_file(tmp_path, capsys, monkeypatch):
    import nbcoll.perf.__main__ as perf

    folder = tmp_path / "results"
    folder.mkdir()
    real_run = perf.run

    def run_then_lose_the_folder(*args, **kwargs):
        rows = real_run(*args, **kwargs)  # the rows were written to the JSON file as they came
        (folder / "perf.json").unlink()
        folder.rmdir()
        return rows

    monkeypatch.setattr(perf, "run", run_then_lose_the_folder)
    status = _perf_here(["-J", str(folder / "perf.json"), "--plot", str(folder / "perf.png")])
    out, err = capsys.readouterr()
    assert status == 2
    assert len(_rows(out)) == 2 and "# Avg bus bandwidth" in out, out  # the results, on standard output
    assert f"nbcoll.perf: -J: could not write {folder / 'perf.json'}:" in err, err
    assert f"nbcoll.perf: --plot: could not write {folder / 'perf.png'}:" in err, err


@pytest.mark.mpi
def test_every_rank_refuses_an_output_path_that_cannot_be_written(tmp_path):
    missing = tmp_path / "missing" / "perf.json"
    # Each rank says what main returned and exits 0 if it was 2: the launcher ends the job at a rank's first
    # non-zero exit, before the other rank could report its own.
    code = (
        "import sys; from nbcoll.perf.__main__ import main; status = main(sys.argv[1:]); "
        "print('main returned', status); sys.exit(0 if status == 2 else 1)"
    )
    result = launch(2, code=code, args=[*SMALL_SWEEP, "-J", str(missing)], env={"NBCOLL_BACKEND": "numpy"}, timeout=120)
    assert result.ok and all("main returned 2" in output for output in result.outputs), result.report()
    assert (
        f"nbcoll.perf: -J: cannot write {missing}: the directory {missing.parent} does not exist" in result.outputs[0]
    )
