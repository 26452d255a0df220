"""The Python side of gpu_check.sh: what the machine lacks, and each step's figures.

    python benchmarks/gpu_check_steps.py preflight gpu|dry INFO_FILE
    python benchmarks/gpu_check_steps.py report OUTDIR STEP VERDICT SECONDS LIMIT
    python benchmarks/gpu_check_steps.py cut_cleanly OUTDIR STEP

``preflight`` prints one ``MISSING: ...`` line per missing piece (exit 3 if any) and ``note: ...`` lines for
optional ones, and writes ``python -m nbcoll info`` into INFO_FILE. ``report`` prints one line of figures for the
summary (``-`` when the step left none) and rewrites ``OUTDIR/summary.json`` with every step reported so far. It
reads only files: a step that was killed still gets the figures it wrote as it went. ``cut_cleanly`` exits 0 when
a pytest step stopped at its limit had passed tests and failed none (the suite step is planned to be cut).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path


def _kernel_compile_error() -> str | None:
    """Why numba-cuda cannot compile a one-line kernel to PTX here (no GPU needed), or None when it can.

    With NumPy 2.5, numba-cuda 0.30 fails on every kernel (it calls ``numpy.row_stack``, which 2.5 removed):
    that is worth saying before the steps spend minutes failing one test at a time.
    """

    def store_one(out):
        out[0] = 1

    try:
        from numba import cuda

        cuda.compile_ptx(store_one, "void(float32[::1])", cc=(9, 0))
    except Exception as exc:
        hint = " (numba-cuda 0.30 needs NumPy < 2.5)" if "row_stack" in repr(exc) else ""
        return f"{exc!r}{hint}"
    return None


def _importable(module: str) -> bool:
    """Whether ``module`` imports: a namespace folder left by another package has a spec but no module in it."""
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def preflight(mode: str, info_file: str) -> int:
    """Check what the GPU check needs; gpu_check.sh bounds it like every step."""
    missing, notes = [], []
    for module, install in (("numpy", "numpy"), ("numba", "numba"), ("mpi4py", "mpi4py")):
        try:
            importlib.import_module(module)
        except Exception as exc:
            missing.append(f"python package '{module}' (pip install {install}): {exc!r}")
    # numba itself still ships a numba.cuda package: only numba_cuda says that numba-cuda is installed.
    if importlib.util.find_spec("numba_cuda") is None:
        missing.append("python package 'numba-cuda' (pip install 'numba-cuda[cu13]')")
    try:
        from cuda import bindings

        notes.append(f"cuda-bindings {bindings.__version__}")
    except Exception as exc:
        missing.append(f"python package 'cuda-bindings' (comes with numba-cuda[cu13]): {exc!r}")
    if importlib.util.find_spec("pytest") is None:
        notes.append("no pytest: the test steps are skipped")
    else:
        if importlib.util.find_spec("pytest_timeout") is None:
            notes.append("no pytest-timeout: a test that hangs holds its step until the step's limit")
        if importlib.util.find_spec("xdist") is None:
            notes.append("no pytest-xdist: the suite runs in one process, and gets less far before its limit")
        if not _importable("sphinx.application") or not _importable("furo"):
            notes.append("no Sphinx or no Furo theme: the suite skips the docs tests (tests/test_docs.py)")
    if not any("'mpi4py'" in line for line in missing):
        try:
            from mpi4py import MPI

            notes.append(f"MPI: {MPI.Get_library_version().splitlines()[0]}")
        except Exception as exc:
            missing.append(f"mpi4py cannot load an MPI library (pip install mpich, or install MPICH): {exc!r}")
    try:
        from nbcoll.launch import find_mpiexec

        mpiexec = find_mpiexec()
        if not (os.path.isfile(mpiexec) and os.access(mpiexec, os.X_OK)):
            raise RuntimeError(f"{mpiexec} is not an executable file")
        notes.append(f"mpiexec: {mpiexec}")
    except Exception as exc:
        missing.append(f"no MPI runtime: {exc} (pip install mpich, or install MPICH or Open MPI)")
    if mode == "gpu":
        try:
            from nbcoll.backend import gpu_count

            count = gpu_count()
        except Exception as exc:
            count, notes = 0, [*notes, f"nbcoll does not import: {exc!r}"]
        if count == 0:
            missing.append("no CUDA GPU or driver found (run with --dry-run to rehearse on the CPU)")
        else:
            notes.append(f"{count} GPU(s)")
        compile_error = _kernel_compile_error()
        if compile_error:
            missing.append(f"numba-cuda cannot compile a kernel here: {compile_error}")
    if not missing:
        with open(info_file, "w") as info:
            done = subprocess.run([sys.executable, "-m", "nbcoll", "info"], stdout=info, stderr=subprocess.STDOUT)
        notes.append(
            f"wrote {Path(info_file).name} (backend, device, versions)"
            if done.returncode == 0
            else f"python -m nbcoll info failed (exit {done.returncode}): see {Path(info_file).name}"
        )
    for note in notes:
        print(f"note: {note}")
    for line in missing:
        print(f"MISSING: {line}")
    return 3 if missing else 0


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _figure(value: float) -> float:
    """Four significant digits: enough for a summary line, whatever the scale."""
    return float(f"{value:.4g}")


def _pytest_figures(log: Path) -> dict:
    """The counts of pytest's last line, or, for a run stopped before it, the verdicts printed so far (-v)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    counts = {}
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    if last:
        for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", last[-1]):
            counts[word.rstrip("s") if word.startswith("error") else word] = int(number)
    else:
        for word in ("PASSED", "FAILED", "SKIPPED", "ERROR"):
            counts[word.lower() if word != "ERROR" else "error"] = len(re.findall(rf"\b{word}\b", text))
        counts["stopped_early"] = True
    # pytest's summary lines, or the verdicts of -v as they come: "ID FAILED [ 5%]", or "[gw3] [ 5%] FAILED ID"
    # from pytest-xdist's workers. A run stopped at its limit prints no summary.
    named = re.findall(r"^(?:FAILED (\S+)|(\S+::\S+) FAILED\b|\[gw\d+\] \[ *\d+%\] FAILED (\S+))", text, flags=re.M)
    counts["failures"] = list(dict.fromkeys("".join(groups) for groups in named))[:20]
    return counts


def _latest_json(outdir: Path, pattern: str) -> dict | None:
    """The report of the last file matching ``pattern`` (a step writes one per backend), or None."""
    reports = sorted(outdir.glob(pattern))
    return _json(reports[-1]) if reports else None


def figures_of(outdir: Path, step: str) -> dict:
    if step == "smoke":
        report = _json(outdir / "smoke.json") or {}
        return {name: check for name, check in report.get("checks", {}).items()} | {"gpu": report.get("gpu")}
    if step in ("gpu_tests", "suite"):
        return _pytest_figures(outdir / f"{step}.log")
    if step == "kernels":
        report = _latest_json(outdir, "kernels_*.json")
        if not report:
            return {}
        rates = {r["kernel"]: f"{r['rate']:.4g} {r['what']} ({r['percent']:.0f}%)" for r in report["results"]}
        copy_ceiling = _figure(report["ceilings"]["copy GB/s"])
        return {"copy_ceiling_GBps": copy_ceiling, "complete": report.get("complete"), "rates": rates}
    if step == "launch_cost":
        report = _latest_json(outdir, "launch_cost_*.json")
        return {"us_a_call": {k: _figure(v) for k, v in report["us_a_call"].items()}} if report else {}
    if step.startswith("all_reduce"):
        report = _json(outdir / f"{step}.json")
        if not report:
            return {}
        busbw = [m["busbw"] for r in report["rows"] for m in (r["out_of_place"], r["in_place"]) if m]
        return {
            "avg_busbw_GBps": _figure(report["avg_busbw"]),
            "max_busbw_GBps": _figure(max(busbw)) if busbw else None,
            "largest_bytes": max((r["nbytes"] for r in report["rows"]), default=0),
            "wrong": report["wrong"],
            "complete": report.get("complete"),
        }
    if step == "profile_2ranks":
        reports = sorted(outdir.glob("profile_*_2ranks.txt"))
        text = reports[-1].read_text() if reports else ""
        return {f"{n} B": f"{ms} ms" for n, ms in re.findall(r"^## (\d+) bytes: ([\d.]+) ms per call", text, re.M)}
    if step.startswith("direct_path"):
        log = outdir / f"{step}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        hops = re.findall(r"^copies per byte and hop \(all-gather\): (.*)$", text, re.M)
        return {"ranks_ok": text.count("direct path ok"), "copies_a_hop": hops[0] if hops else None}
    if step == "device_collectives":
        report = _latest_json(outdir, "device_collectives_*.json")  # the host path's runs are named host_ring_*
        if not report:
            return {}
        figures: dict = {"complete": report.get("complete")}
        for nranks, lines in report["results"].items():
            timed = [m for line in lines for m in (line["device"]["out_of_place"], line["device"]["in_place"])]
            small = [line["device"]["out_of_place"]["seconds"] for line in lines if line["nbytes"] == 8]
            largest = max(lines, key=lambda line: line["nbytes"])
            figures |= {
                f"{nranks}ranks_max_busbw_GBps": _figure(max(m["busbw"] for m in timed)),
                f"{nranks}ranks_us_8B": _figure(small[0] * 1e6) if small else None,
                f"{nranks}ranks_of_copy_ceiling": _figure(largest["fraction"]),  # at the largest size
                f"{nranks}ranks_wrong": sum(m["wrong"] or 0 for m in timed),
            }
        return figures
    if step == "kill_drill":
        return _json(outdir / "kill_drill.json") or {}
    return {}


def _short(figures: dict) -> str:
    parts = []
    for key, value in figures.items():
        if value in (None, [], {}):
            continue
        if key == "rates":
            value = "; ".join(f"{kernel} {rate}" for kernel, rate in value.items())
        elif key == "us_a_call":
            value = "; ".join(f"{piece} {us} us" for piece, us in value.items())
        elif key == "failures":
            value = " ".join(value)
        elif isinstance(value, dict):
            value = "ok" if value.get("ok") else "FAILED" if "ok" in value else value
        parts.append(f"{key}={value}")
    return ", ".join(parts) or "-"


def report(argv: list[str]) -> int:
    outdir, step, verdict, seconds, limit = Path(argv[0]), argv[1], argv[2], int(argv[3]), int(argv[4])
    figures = figures_of(outdir, step)
    summary_path = outdir / "summary.json"
    summary = _json(summary_path) or {"steps": []}
    summary["steps"] = [s for s in summary["steps"] if s["step"] != step]
    summary["steps"].append({"step": step, "verdict": verdict, "seconds": seconds, "limit": limit, **figures})
    partial = summary_path.with_suffix(".json.partial")
    partial.write_text(json.dumps(summary, indent=2))
    partial.replace(summary_path)
    print(_short(figures))
    return 0


def cut_cleanly(outdir: Path, step: str) -> bool:
    """Whether a pytest step stopped at its limit had run at least one test and failed none: the suite step is
    planned to be cut, so such a cut is no failure of the check."""
    figures = _pytest_figures(outdir / f"{step}.log")
    return figures.get("passed", 0) > 0 and not figures.get("failed") and not figures.get("error")


def main(argv: list[str]) -> int:
    if argv[:1] == ["preflight"] and len(argv) == 3:
        return preflight(argv[1], argv[2])
    if argv[:1] == ["report"] and len(argv) == 6:
        return report(argv[1:])
    if argv[:1] == ["cut_cleanly"] and len(argv) == 3:
        return 0 if cut_cleanly(Path(argv[1]), argv[2]) else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
