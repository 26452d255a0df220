"""`python -m nbcoll info`: the report's dictionary, its printed text, and the subcommand machinery."""

import argparse
import json
import os
import platform
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest

import nbcoll
from nbcoll import __main__ as cli
from nbcoll import info


def _run_cli(*args: str, backend: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NBCOLL_BACKEND"] = backend
    return subprocess.run([sys.executable, "-m", "nbcoll", *args], env=env, capture_output=True, text=True, timeout=120)


def test_collect_reports_every_key_in_print_order(backend):
    report = info.collect()
    assert list(report) == list(info.LABELS)
    assert all(isinstance(value, str) and value for value in report.values())
    assert report["backend"] == backend == nbcoll.get_backend()


def test_collect_reports_the_installed_versions():
    report = info.collect()
    assert report["nbcoll"] == nbcoll.__version__
    assert report["python"] == platform.python_version()
    assert report["numpy"] == np.__version__
    assert report["numba"] == metadata.version("numba")
    assert report["numba-cuda"] == metadata.version("numba-cuda")
    assert report["mpi4py"] == metadata.version("mpi4py")


def test_collect_reports_the_first_line_of_the_mpi_library_version():
    from mpi4py import MPI

    first_line = MPI.Get_library_version().strip().splitlines()[0]
    assert info.collect()["mpi_library"] == " ".join(first_line.split())


def test_device_name_follows_the_backend(backend):
    expected = {"numpy": "none (numpy backend)", "sim": "CUDA simulator"}
    if backend in expected:
        assert info.collect()["device"] == expected[backend]
    else:
        assert "compute capability" in info.collect()["device"]


def test_a_missing_distribution_is_reported_not_raised():
    assert info.distribution_version("no-such-distribution-for-nbcoll") == info.NOT_INSTALLED


def test_format_report_aligns_one_labelled_line_per_key():
    text = info.format_report({"backend": "sim", "mpi_library": "MPICH Version: 5.0.2", "extra": "x"})
    assert text.splitlines() == ["backend:     sim", "MPI library: MPICH Version: 5.0.2", "extra:       x"]


def test_main_info_prints_the_collected_report(capsys):
    assert cli.main(["info"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == info.format_report(info.collect())
    assert "numba-cuda:" in printed and "MPI library:" in printed


def test_main_info_json_prints_the_dictionary(capsys):
    assert cli.main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == info.collect()


def test_main_without_a_subcommand_prints_the_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().err  # the help lists the subcommands


def test_python_dash_m_nbcoll_info_on_the_simulator():
    proc = _run_cli("info", backend="sim")
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(":", 1) for line in proc.stdout.splitlines())
    assert lines["backend"].strip() == "sim"
    assert lines["device"].strip() == "CUDA simulator"
    assert lines["nbcoll"].strip() == nbcoll.__version__
    assert lines["MPI library"].strip()


def test_python_dash_m_nbcoll_info_on_numpy():
    proc = _run_cli("info", "--json", backend="numpy")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["backend"] == "numpy"
    assert report["device"] == "none (numpy backend)"


def test_info_on_cuda_without_a_gpu_reports_why_instead_of_failing():
    if nbcoll.backend.gpu_count() > 0:
        pytest.skip("a GPU is present")
    proc = _run_cli("info", "--json", backend="cuda")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["backend"] == "cuda"
    assert report["device"].startswith("unavailable (BackendError: ")
    assert "NBCOLL_BACKEND=sim" in report["device"]


@pytest.mark.gpu
def test_python_dash_m_nbcoll_info_names_the_gpu():
    proc = _run_cli("info", "--json", backend="cuda")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    name = nbcoll.backend.cuda().get_current_device().name
    assert report["backend"] == "cuda"
    assert report["device"].startswith(name.decode() if isinstance(name, bytes) else str(name))


def test_a_new_subcommand_is_one_decorated_function(monkeypatch, capsys):
    monkeypatch.setattr(cli, "SUBCOMMANDS", dict(cli.SUBCOMMANDS))

    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("word")

    @cli.subcommand("echo", "print a word", arguments=arguments)
    def echo(args: argparse.Namespace) -> int:
        print(args.word)
        return 3

    assert cli.main(["echo", "hello"]) == 3
    assert capsys.readouterr().out == "hello\n"
    with pytest.raises(ValueError, match="'echo' is defined twice"):
        cli.subcommand("echo", "again")(echo)
