"""The multi-rank tutorials on the docs pages: run on their ranks, and each cell's output put under that cell.

sphinx-gallery runs a tutorial inside the Sphinx process, one cell at a time, and shows under each cell what it
printed. A tutorial that calls ``nbcoll.launch.relaunch(n)`` is ``n`` processes, though, so the build leaves it
out of sphinx-gallery's runs (``filename_pattern``) and, when the builder starts, runs it itself the way a reader's
``python tutorials/NN_name.py`` does: ``tutorial_cells.py`` (next to this file) runs its cells, and its
``relaunch`` starts the ``n`` ranks through :func:`nbcoll.launch.launch`, with the tutorial's own ``env``; every
rank marks in its output where each cell starts. When Sphinx then reads the page sphinx-gallery wrote (the prose
and the code of each cell), :func:`insert_outputs` puts under each cell's code what rank 0 printed in it, the
pictures it drew, and what the other ranks printed, under the caption "Ranks 1-3".

Why not in the Sphinx process, as rank 0 of the job: that process would start MPI as a singleton and spawn the
other ranks, and MPICH's process manager ends a whole job, the singleton included, when one rank fails; a broken
tutorial would kill the build without a word. Under the launcher a failing rank ends its own job, a hang ends at
``NBCOLL_DOCS_TIMEOUT`` (default 600 s), and the build reports either as a warning, with the ranks' last output.

The runs are cached in ``NBCOLL_DOCS_CACHE`` (default ``docs/_build/tutorial_runs``), one folder per hash of the
tutorial, the runner and the backend, so a rebuild runs only the tutorials that changed.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tutorial_cells import CELL_MARKER, FIGURE_MARKER, FIGURES_VARIABLE

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
RUNNER = DOCS / "tutorial_cells.py"
RUN_FORMAT = "5"
"""Part of every run's hash: change it when what a run records changes, and every tutorial runs again."""


def ranks(path: Path) -> int | None:
    """The ``n`` of the tutorial's ``nbcoll.launch.relaunch(n)`` call, or None when it runs as one process."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "relaunch":
            first = node.args[0] if node.args else None
            return first.value if isinstance(first, ast.Constant) and isinstance(first.value, int) else 0
    return None


def cache_dir() -> Path:
    return Path(os.environ.get("NBCOLL_DOCS_CACHE") or DOCS / "_build" / "tutorial_runs")


def run_dir(path: Path, backend: str) -> Path:
    hasher = hashlib.sha256(RUN_FORMAT.encode())
    for part in (path.read_bytes(), RUNNER.read_bytes(), backend.encode()):
        hasher.update(part)
    return cache_dir() / f"{path.stem}-{hasher.hexdigest()[:16]}"


def read_status(folder: Path) -> tuple[int, float]:
    status, seconds = (folder / "status").read_text(encoding="utf-8").split()
    return int(status), float(seconds)


def execute(path: Path, backend: str, timeout: float) -> Path:
    """Run ``path`` on its ranks unless a successful run is cached; return the run's folder.

    The folder holds ``rank<r>.txt`` (each rank's output, with the cell markers), ``status`` (exit status and
    seconds), ``backend`` and ``figures/``. A failed run is kept, so that the page shows it, but runs again at the
    next build.
    """
    folder = run_dir(path, backend)
    if (folder / "status").is_file() and read_status(folder)[0] == 0:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "figures").mkdir(parents=True)
    env = dict(os.environ)
    env[FIGURES_VARIABLE] = str(folder / "figures")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    env["NBCOLL_BACKEND"] = backend
    env["NBCOLL_DOCS_TIMEOUT"] = str(timeout)
    for name in ("NBCOLL_TRACE", "NBCOLL_ALGO", "NBCOLL_DEBUG", "NBCOLL_LAUNCHED"):
        env.pop(name, None)  # a reader's shell would not have them either
    start = time.perf_counter()
    with open(folder / "plain.txt", "w", encoding="utf-8") as plain:
        try:
            # The launcher ends a stuck job at `timeout`; this limit is only the last resort behind it.
            status = subprocess.run(
                [sys.executable, str(RUNNER), str(folder), str(path)],
                cwd=ROOT,
                env=env,
                stdout=plain,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout + 60,
            ).returncode
        except subprocess.TimeoutExpired:
            status = 124
    if not (folder / "rank0.txt").is_file():  # the tutorial never re-launched: its one process is rank 0
        shutil.copyfile(folder / "plain.txt", folder / "rank0.txt")
    (folder / "backend").write_text(backend, encoding="utf-8")
    (folder / "status").write_text(f"{status} {time.perf_counter() - start:.1f}\n", encoding="utf-8")
    return folder


@dataclass
class Cell:
    """What the ranks printed in one cell, and the pictures that appeared during it."""

    outputs: dict[int, list[str]] = field(default_factory=dict)
    figures: list[tuple[str, str]] = field(default_factory=list)
    """``(file name, title)`` in the order they appeared."""


def read_cells(folder: Path) -> dict[int, Cell]:
    """The run's output per cell, keyed by the line the cell's code starts on (0: before the first cell)."""
    cells: dict[int, Cell] = {}
    titles: dict[str, str] = {}
    placed: set[str] = set()
    rank_files = sorted(folder.glob("rank*.txt"), key=lambda p: int(p.stem[4:]))
    for rank_file in rank_files:
        rank, cell = int(rank_file.stem[4:]), 0
        for line in clean_output(rank_file.read_text(encoding="utf-8"), folder / "figures").split("\n"):
            if line.startswith(CELL_MARKER):
                cell = int(line[len(CELL_MARKER) :])
            elif line.startswith(FIGURE_MARKER):
                name, _, title = line[len(FIGURE_MARKER) :].partition("\t")
                titles[name] = titles.get(name) or title
                if name not in placed:  # the lowest rank that saw it first names its cell
                    placed.add(name)
                    cells.setdefault(cell, Cell()).figures.append((name, ""))
            else:
                cells.setdefault(cell, Cell()).outputs.setdefault(rank, []).append(line)
    for cell in cells.values():
        cell.figures = [(name, titles.get(name, "")) for name, _ in cell.figures]
        for lines in cell.outputs.values():
            while lines and not lines[-1]:
                lines.pop()
            while lines and not lines[0]:
                lines.pop(0)
    return cells


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PROGRESS_BAR = re.compile(r"^(.*?):\s+\d+%\|")


def clean_output(text: str, figures: Path | None = None) -> str:
    """The output as a terminal leaves it: no colours, no progress bars (they clear themselves), no blank runs.

    The figures folder is written ``$NBCOLL_FIGURES_DIR`` and the repository ``.``, so that the page shows no path
    of the machine that built it.
    """
    if figures is not None:
        text = text.replace(str(figures), "$NBCOLL_FIGURES_DIR")
    text = text.replace(str(ROOT) + os.sep, "")
    lines: list[str] = []
    # split("\n"), not splitlines(): the markers start with a character that splitlines() takes for a line break.
    for line in ANSI_ESCAPE.sub("", text).split("\n"):
        if line.startswith((CELL_MARKER, FIGURE_MARKER)):
            lines.append(line)
            continue
        last = line.rstrip("\r").split("\r")[-1].rstrip().expandtabs(8)
        if PROGRESS_BAR.match(last) or (not last and line.strip()):
            continue
        if not last and lines and not lines[-1]:
            continue
        lines.append(last)
    return "\n".join(lines).strip("\n")


def figure_files(path: Path, folder: Path, images: Path) -> dict[str, Path]:
    """Copy the run's pictures into the gallery's image folder under sphinx-gallery's names, in cell order.

    The first is ``sphx_glr_<name>_001.png``: sphinx-gallery makes the tutorial's thumbnail from it.
    """
    images.mkdir(parents=True, exist_ok=True)
    named = {}
    ordered = [name for _, cell in sorted(read_cells(folder).items()) for name, _ in cell.figures]
    for number, name in enumerate(ordered, start=1):
        source = folder / "figures" / name
        if source.is_file():
            named[name] = images / f"sphx_glr_{path.stem}_{number:03d}.png"
            shutil.copyfile(source, named[name])
    return named


WIDE = 1100
"""Pixels: a wider picture is shown at its own size, in a box that scrolls sideways, rather than shrunk to the
page (about 740 pixels wide), where its labels could not be read. Up to this width the page shrinks it 1.5 times
at most."""


def png_width(path: Path) -> int:
    """The width in pixels of the PNG at ``path``, read from its header (0 if it is not a PNG)."""
    with open(path, "rb") as file:
        header = file.read(24)
    return struct.unpack(">I", header[16:20])[0] if header[:8] == b"\x89PNG\r\n\x1a\n" else 0


def figure_rst(image: Path, name: str, title: str) -> list[str]:
    """A figure for the picture ``name`` copied to ``image`` (under docs/): the figure's titles are its caption
    and alternative text."""
    relative = "/" + image.resolve().relative_to(DOCS).as_posix()
    alt = " ".join((title or f"the picture {name}").split())
    caption = f"``{name}``" + (": " + re.sub(r"([\\`*_|<>\[\]])", r"\\\1", alt) if title else "")
    out = [f".. figure:: {relative}", f"   :alt: {alt}", "   :class: sphx-glr-single-img"]
    width = png_width(image) if image.is_file() else 0
    if width > WIDE:
        out += [f"   :width: {width}px", "   :figclass: nbcoll-wide-figure"]
    return out + ["", f"   {caption}", ""]


GENERATED = re.compile(r"^\.\. GENERATED FROM PYTHON SOURCE LINES (\d+)-(\d+)$")
DOWNLOADS = re.compile(r"^\.\. _sphx_glr_download_")


def cell_rst(cell: Cell, gallery: str, stem: str, figures: dict[str, Path]) -> list[str]:
    """The rst under one cell's code: rank 0's output, its pictures, then the other ranks' output."""
    out: list[str] = []
    own = cell.outputs.get(0, [])
    if own:
        out += [".. rst-class:: sphx-glr-script-out", "", " .. code-block:: none", ""]
        out += [f"    {line}".rstrip() for line in own] + [""]
    for name, title in cell.figures:
        if name in figures:
            out += figure_rst(figures[name], name, title)
    others = {rank: lines for rank, lines in sorted(cell.outputs.items()) if rank and lines}
    if others:
        first, last = min(others), max(others)
        caption = f"Rank {first}" if first == last else f"Ranks {first}-{last}"
        out += [".. rst-class:: sphx-glr-script-out nbcoll-other-ranks", "", " .. code-block:: none"]
        out += [f"    :caption: {caption}", ""]
        for rank, lines in others.items():
            # A line that already names its rank ("rank 2: ...") is shown as it is; the others are prefixed.
            named = all(line.startswith(f"rank {rank}") or not line for line in lines)
            out += [(f"    {line}" if named else f"    [rank {rank}] {line}").rstrip() for line in lines]
        out += [""]
    return out


def insert_outputs(source: str, folder: Path, gallery: str, stem: str, nprocs: int) -> str:
    """``source`` (the page sphinx-gallery wrote) with the run's output under each cell's code."""
    cells = read_cells(folder)
    figures = {
        name: DOCS / gallery / "images" / f"sphx_glr_{stem}_{n:03d}.png"
        for n, name in enumerate((name for _, c in sorted(cells.items()) for name, _ in c.figures), start=1)
    }
    status, seconds = read_status(folder)
    backend = (folder / "backend").read_text(encoding="utf-8").strip()
    lines = source.split("\n")
    out: list[str] = []
    pending: int | None = None  # the first line of the code cell whose output is due
    if 0 in cells and any(cells[0].outputs.values()):
        pending = 0  # printed before the first cell: shown with the first one
    for line in lines:
        match = GENERATED.match(line)
        if match or DOWNLOADS.match(line):
            if pending is not None and pending in cells:
                out += cell_rst(cells.pop(pending), gallery, stem, figures)
            pending = None
            if match:
                pending = int(match.group(1))
        if DOWNLOADS.match(line):
            outcome = "finished" if status == 0 else f"failed with exit status {status}"
            out += [".. rst-class:: sphx-glr-timing", ""]
            out += [f"   **Run on {nprocs} ranks, on the {backend} backend, when this site was built:** {outcome}"]
            out += [f"   in {seconds:.0f} s.", ""]
        out.append(line)
    return "\n".join(out)
