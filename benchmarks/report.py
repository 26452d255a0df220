"""What every benchmark writes: the environment it ran in, its JSON record, and its tables for the docs.

A benchmark measures, then calls these three::

    env = environment(numba=numba.__version__)                  # date, host, machine, versions, backend
    write_json(stem.with_suffix(".json"), {"env": env, "results": rows})
    rst = list_table(["size (B)", "time (us)"], [[str(r["nbytes"]), f"{r['us']:.1f}"] for r in rows])

The JSON is written to a ``.partial`` file first and renamed, so that a run stopped midway never leaves a
half-written record in ``benchmarks/results``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def environment(**versions: str) -> dict[str, str]:
    """Where and with what the numbers were measured; ``versions`` (numba, mpi4py, ...) follow NumPy's."""
    import nbcoll

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    env.update(versions)
    env.update({"nbcoll": nbcoll.__version__, "backend": nbcoll.get_backend()})
    return env


def write_json(path: Path, report: dict[str, Any], indent: int | None = 2) -> None:
    """Write ``report`` to ``path`` whole or not at all (through ``path.partial`` and a rename)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=indent))
    partial.replace(path)


def list_table(header: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> list[str]:
    """The lines of an reST ``list-table`` with one header row: ``header`` then each row's cells, as given."""
    lines = [f".. list-table::{' ' + title if title else ''}", "   :header-rows: 1", ""]
    for cells in [header, *rows]:
        lines += [f"   * - {cells[0]}", *[f"     - {cell}" for cell in cells[1:]]]
    return lines
