"""Run a tutorial cell by cell on its ranks, marking where each cell's output starts: what the docs build does for
a tutorial that re-launches itself with ``nbcoll.launch.relaunch(n)``.

Usage (from the repository root; ``tutorial_ranks.py`` starts it)::

    python docs/tutorial_cells.py RUN_DIR tutorials/08_ring_all_reduce.py

The cells are the ones sphinx-gallery cuts the file into (the code between ``# %%`` lines; a file without them is
one cell), so that the build can put each cell's output under that cell on the page.

Started plainly, this runs the tutorial as ``python tutorials/NN_name.py`` would, in a namespace of its own named
``__main__``, until the tutorial calls ``nbcoll.launch.relaunch(n, env=...)``. Here that call starts this same
script on ``n`` ranks through :func:`nbcoll.launch.launch`, with the tutorial's ``env`` and the build's time limit
(``NBCOLL_DOCS_TIMEOUT``), writes each rank's output to ``RUN_DIR/rank<r>.txt`` and ends with the job's status.

On a rank, ``relaunch`` returns at once (the rank is under MPI), and the runner writes a line
``CELL_MARKER <line>`` before the cell whose code starts on that line of the file, and after the cell one line
``FIGURE_MARKER <name> <title>`` per picture that appeared in ``NBCOLL_FIGURES_DIR`` (the title: what matplotlib
drew as the figure's titles, when this rank saved it).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

CELL_MARKER = "\x1enbcoll-cell "
FIGURE_MARKER = "\x1enbcoll-figure "
FIGURES_VARIABLE = "NBCOLL_FIGURES_DIR"


def code_cells(tutorial: Path) -> list[tuple[int, str]]:
    """``(first line, code)`` of each code cell of ``tutorial``, as sphinx-gallery cuts it."""
    from sphinx_gallery.py_source_parser import split_code_and_text_blocks

    _, blocks = split_code_and_text_blocks(str(tutorial))
    return [(block.lineno, block.content) for block in blocks if block.type == "code"]


def figure_title(figure) -> str:
    """The titles a matplotlib figure shows (its suptitle, then each axes' title), joined by ``; ``."""
    texts = []
    suptitle = getattr(figure, "get_suptitle", lambda: "")()
    if suptitle:
        texts.append(suptitle)
    for axes in figure.axes:
        for loc in ("left", "center", "right"):
            text = axes.get_title(loc=loc)
            if text and text not in texts:
                texts.append(text)
    return "; ".join(" ".join(text.split()) for text in texts)


def record_figure_titles(titles: dict[str, str]):
    """Make every ``Figure.savefig`` to a file note the figure's title in ``titles`` (absolute path -> title).

    When matplotlib is not imported yet, this waits for it (its import takes a second, which a tutorial that
    draws nothing should not pay). Returns the function that puts ``savefig`` back.
    """
    patched = []

    def patch(figure_module) -> None:
        original = figure_module.Figure.savefig

        def savefig(self, fname, *args, **kwargs):
            result = original(self, fname, *args, **kwargs)
            if isinstance(fname, (str, os.PathLike)):
                titles[os.path.abspath(fname)] = figure_title(self)
            return result

        figure_module.Figure.savefig = savefig
        patched.append(lambda: setattr(figure_module.Figure, "savefig", original))

    hook = None
    if "matplotlib.figure" in sys.modules:
        patch(sys.modules["matplotlib.figure"])
    else:
        hook = _AfterImport("matplotlib.figure", patch)
        sys.meta_path.insert(0, hook)

    def restore() -> None:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)
        for undo in patched:
            undo()

    return restore


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` right after the module ``name`` is first imported, however it is imported."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the other finders find it; this one is done
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module) -> None:
                run(module)
                self.then(module)

            spec.loader.exec_module = exec_module
        return spec


def run_cells(tutorial: Path, args: list[str], markers: bool) -> None:
    """Run the code cells of ``tutorial`` one after the other in one ``__main__`` namespace, as Python would."""
    main = types.ModuleType("__main__")
    main.__file__ = str(tutorial)
    sys.modules["__main__"] = main  # what pickle and dataclasses look names up in
    sys.argv = [str(tutorial), *args]
    sys.path[0] = str(tutorial.parent)  # as `python tutorial.py` sets it
    figures = Path(os.environ.get(FIGURES_VARIABLE) or tutorial.parent)
    titles: dict[str, str] = {}
    if markers:
        record_figure_titles(titles)
    seen: set[str] = set()
    for lineno, code in code_cells(tutorial):
        if markers:
            print(f"{CELL_MARKER}{lineno}", flush=True)
        # Blank lines first, so that a traceback names the tutorial's own line numbers.
        exec(compile("\n" * (lineno - 1) + code, str(tutorial), "exec"), main.__dict__)
        sys.stdout.flush()
        sys.stderr.flush()
        if markers:
            for png in sorted(figures.glob("*.png")):
                if png.name not in seen:
                    seen.add(png.name)
                    print(f"{FIGURE_MARKER}{png.name}\t{titles.get(str(png.resolve()), '')}", flush=True)


def relaunch_into(run_dir: Path, tutorial: Path, args: list[str]):
    """A stand-in for ``nbcoll.launch.relaunch`` that starts this runner on the ranks and records their output."""
    import nbcoll.launch

    def relaunch(nprocs: int, *, env=None, timeout=None) -> None:
        if nbcoll.launch.under_mpi():
            return
        limit = float(os.environ.get("NBCOLL_DOCS_TIMEOUT", "600"))
        limit = min(limit, timeout) if timeout else limit
        runner_args = [str(run_dir), str(tutorial), *args]
        result = nbcoll.launch.launch(nprocs, __file__, args=runner_args, env=env, timeout=limit)
        for rank, output in enumerate(result.outputs):
            (run_dir / f"rank{rank}.txt").write_text(output, encoding="utf-8")
        (run_dir / "job.json").write_text(
            json.dumps({"nprocs": nprocs, "status": result.describe_status(), "launcher": result.launcher_output}),
            encoding="utf-8",
        )
        sys.exit(0 if result.ok else 124 if result.timed_out else 1)

    return relaunch


def main(argv: list[str]) -> None:
    run_dir, tutorial, *args = argv
    tutorial_path = Path(tutorial).resolve()
    import nbcoll.launch

    if nbcoll.launch.under_mpi():
        run_cells(tutorial_path, args, markers=True)
        return
    nbcoll.launch.relaunch = relaunch_into(Path(run_dir).resolve(), tutorial_path, args)
    run_cells(tutorial_path, args, markers=True)


if __name__ == "__main__":
    main(sys.argv[1:])
