"""The tutorials gallery: sphinx-gallery's settings for ``tutorials/``, and what the build adds to them.

sphinx-gallery (``sphinx_gallery.gen_gallery``) turns every ``tutorials/NN_name.py`` into a page
``tutorials/NN_name`` (the generated folder ``docs/tutorials/``, which git ignores): the module docstring, then each
cell's text, code and, when the build runs the tutorial, what the cell printed and drew; links to download the
script and a notebook; the run time. ``tutorials/GALLERY_HEADER.rst`` opens the index of thumbnails, which
``docs/tutorials.rst`` shows. A file not yet cut into ``# %%`` cells is one cell.

What the build adds, all set by :func:`gallery_conf` and :func:`setup`:

- **Which tutorials run**: ``NBCOLL_DOCS_EXECUTE`` is ``1`` (the default: all), ``0`` (none: the pages show the
  prose and code) or a comma-separated list of numbers or names (``11,08_ring_all_reduce``). sphinx-gallery
  keeps what it ran in ``docs/tutorials/`` and runs a tutorial again only when its file changed (its md5).
- **The backend**: a tutorial whose docstring names ``NBCOLL_BACKEND=numpy`` runs on numpy, the others on the
  build's backend (``sim`` unless ``NBCOLL_BACKEND`` says otherwise); :func:`reset_example` switches it around each
  tutorial, with the environment, which it puts back afterwards.
- **Time limit**: ``NBCOLL_DOCS_TIMEOUT`` seconds per tutorial (default 600); past it the tutorial stops with an
  error, which fails the build, as a ``sys.exit`` inside the build does.
- **Pictures**: tutorials save PNGs into ``NBCOLL_FIGURES_DIR``; :func:`figures_scraper` puts each one under the
  cell that saved it, with the figure's titles as its caption and alternative text.
- **Multi-rank tutorials** (those that call ``nbcoll.launch.relaunch(n)``) run on their ranks beside the build,
  their output placed under each cell: see ``tutorial_ranks.py``.
- **Titles**: a docstring whose first line is not yet underlined gets the underline on the page.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import tutorial_ranks
from tutorial_cells import FIGURES_VARIABLE, record_figure_titles

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
TUTORIALS = ROOT / "tutorials"
GALLERY = "tutorials"
"""The generated folder, under docs/: the tutorials' pages are ``tutorials/NN_name``."""
BUILD_BACKEND = os.environ.get("NBCOLL_BACKEND") or "sim"
"""The backend of the tutorials that do not choose numpy: conf.py sets it before this module is imported."""


def tutorial_files(directory: Path = TUTORIALS) -> list[Path]:
    """The numbered tutorials, ``NN_name.py``, in order."""
    return sorted(path for path in directory.glob("[0-9][0-9]_*.py") if path.is_file())


def backend_of(path: Path) -> str:
    """``numpy`` when the tutorial's docstring names ``NBCOLL_BACKEND=numpy``, else the build's backend."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return "numpy" if "NBCOLL_BACKEND=numpy" in docstring else BUILD_BACKEND


def selected(path: Path, setting: str | None = None) -> bool:
    """Whether ``NBCOLL_DOCS_EXECUTE`` (or ``setting``) asks for the tutorial at ``path`` to run."""
    setting = (os.environ.get("NBCOLL_DOCS_EXECUTE", "1") if setting is None else setting).strip().lower()
    if setting in ("", "1", "all", "yes", "true"):
        return True
    if setting in ("0", "no", "false", "none"):
        return False
    wanted = {item.strip() for item in setting.split(",") if item.strip()}
    return path.stem[:2] in wanted or path.stem in wanted


def timeout() -> float:
    return float(os.environ.get("NBCOLL_DOCS_TIMEOUT", "600"))


def gallery_conf() -> dict:
    """``sphinx_gallery_conf`` for conf.py. Callables are named by strings, so that the settings pickle."""
    in_process = [p for p in tutorial_files() if selected(p) and tutorial_ranks.ranks(p) is None]
    names = "|".join(re.escape(p.name) for p in in_process)
    return {
        "examples_dirs": str(TUTORIALS),
        "gallery_dirs": GALLERY,
        "filename_pattern": rf"[\\/]({names})$" if names else r"^$",  # the tutorials sphinx-gallery runs
        "plot_gallery": bool(in_process),
        "within_subsection_order": "FileNameSortKey",
        # The tutorials save their pictures and close them, so matplotlib's own scraper (and its import, a second
        # and a half of the build) is not needed: figures_scraper shows what they saved.
        "image_scrapers": ("tutorial_gallery.figures_scraper",),
        "reset_modules": ("tutorial_gallery.reset_example",),
        "reset_modules_order": "both",
        "download_all_examples": True,
        "remove_config_comments": True,
        "show_signature": False,
        "show_memory": False,
        "min_reported_time": 0,  # every page that ran says how long it took
        "write_computation_times": False,  # no separate page of run times
        "capture_repr": (),  # a cell's last expression shows only what it prints, as in a terminal
    }


# ---------------------------------------------------------------------------------------------------------------
# Around each tutorial sphinx-gallery runs in this process: backend, environment, figures folder, time limit, and
# sys.exit, which would otherwise end the build (sphinx-gallery catches a cell's exceptions, not SystemExit).


_SYS_EXIT = sys.exit


class _Run:
    """What :func:`reset_example` set up for the tutorial running now, and puts back after it."""

    environ: dict[str, str] | None = None
    backend: str | None = None
    figures: Path | None = None
    shown: set[str] = set()
    titles: dict[str, str] = {}
    restore_savefig = None
    alarm = None


def _stop(signum, frame):
    raise TimeoutError(f"the tutorial ran longer than NBCOLL_DOCS_TIMEOUT={timeout():.0f} s")


def _exit(status=None):
    """``sys.exit`` while a tutorial runs in the build: an error on its page, not the end of the build."""
    raise RuntimeError(f"the tutorial called sys.exit({status!r}), which would end the docs build")


def reset_example(gallery_conf: dict, fname: str | None, when: str) -> None:
    """sphinx-gallery calls this before and after each tutorial it runs (``fname`` None: entering the folder)."""
    if fname is None:
        return
    import importlib

    nbcoll = importlib.import_module("nbcoll")
    device_backend = importlib.import_module("nbcoll.backend").device_backend()

    if when == "before":
        _Run.environ = dict(os.environ)
        _Run.backend = nbcoll.get_backend()
        backend = backend_of(TUTORIALS / Path(fname).name)
        os.environ["NBCOLL_BACKEND"] = backend
        if backend in ("numpy", device_backend):
            nbcoll.set_backend(backend)
        for name in ("NBCOLL_TRACE", "NBCOLL_ALGO", "NBCOLL_DEBUG", "NBCOLL_LAUNCHED"):
            os.environ.pop(name, None)  # a reader's shell would not have them either
        _Run.figures = Path(tempfile.mkdtemp(prefix="nbcoll-docs-figures-"))
        os.environ[FIGURES_VARIABLE] = str(_Run.figures)
        os.environ["MPLBACKEND"] = "Agg"
        _Run.shown, _Run.titles = set(), {}
        _Run.restore_savefig = record_figure_titles(_Run.titles)
        _Run.alarm = signal.signal(signal.SIGALRM, _stop)
        signal.alarm(max(1, int(timeout())))
        sys.exit = _exit
        return
    sys.exit = _SYS_EXIT
    signal.alarm(0)
    signal.signal(signal.SIGALRM, _Run.alarm or signal.SIG_DFL)
    if _Run.restore_savefig is not None:
        _Run.restore_savefig()
    if _Run.figures is not None:
        shutil.rmtree(_Run.figures, ignore_errors=True)
    if _Run.environ is not None:
        os.environ.clear()
        os.environ.update(_Run.environ)
    if _Run.backend is not None:
        nbcoll.set_backend(_Run.backend)
    _Run.environ = _Run.backend = _Run.figures = _Run.restore_savefig = None


def figures_scraper(block, block_vars: dict, gallery_conf: dict) -> str:
    """The PNGs the cell just saved into ``NBCOLL_FIGURES_DIR``, as figures under the cell.

    Each is copied to sphinx-gallery's next image name (the first one becomes the thumbnail). The figures still
    open when the cell ends are closed, as sphinx-gallery's own scraper would: the next cell starts with none.
    """
    if _Run.figures is None:
        return ""
    rst = []
    for png in sorted(_Run.figures.glob("*.png"), key=lambda p: p.stat().st_mtime):
        if png.name in _Run.shown:
            continue
        _Run.shown.add(png.name)
        target = Path(next(block_vars["image_path_iterator"]))
        shutil.copyfile(png, target)
        rst += tutorial_ranks.figure_rst(target, png.name, _Run.titles.get(str(png.resolve()), ""))
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    return "\n" + "\n".join(rst) + "\n" if rst else ""


# ---------------------------------------------------------------------------------------------------------------
# Sphinx events: the multi-rank runs when the builder starts, their output and the titles when a page is read.


def run_multi_rank(app) -> None:
    """Run the multi-rank tutorials ``NBCOLL_DOCS_EXECUTE`` selects (cached runs are reused); warn on failure.

    Before sphinx-gallery writes the pages, so that it finds their first picture for the thumbnail.
    """
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    images = DOCS / GALLERY / "images"
    for path in tutorial_files():
        if not selected(path) or tutorial_ranks.ranks(path) is None:
            continue
        backend = backend_of(path)
        cached = (tutorial_ranks.run_dir(path, backend) / "status").is_file()
        if not cached:
            logger.info(f"running tutorial {path.name} on its ranks ...")
        folder = tutorial_ranks.execute(path, backend, timeout())
        status, seconds = tutorial_ranks.read_status(folder)
        if not cached:
            logger.info(f"tutorial {path.name}: exit status {status} in {seconds:.0f} s")
        tutorial_ranks.figure_files(path, folder, images)
        if status != 0:
            tails = [f.read_text(encoding="utf-8")[-2000:] for f in sorted(folder.glob("*.txt"))]
            logger.warning(f"tutorial {path.name} failed with exit status {status}:\n" + "\n".join(tails))


TITLE_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+])\1{2,}\s*$")


def page_source(app, docname: str, source: list[str]) -> None:
    """A tutorial page as read: the multi-rank run's output under each cell, and a title if the docstring has none."""
    folder, name = docname.partition("/")[::2]
    path = TUTORIALS / f"{name}.py"
    if folder != GALLERY or not path.is_file():
        return
    text = source[0]
    nprocs = tutorial_ranks.ranks(path)
    if nprocs is not None and selected(path):
        run = tutorial_ranks.run_dir(path, backend_of(path))
        app.env.note_dependency(str(run / "status"))
        if (run / "status").is_file():
            text = tutorial_ranks.insert_outputs(text, run, GALLERY, path.stem, nprocs)
    source[0] = add_missing_title(text, path.stem)


def add_missing_title(text: str, stem: str) -> str:
    """Underline the first line after the page's label when it is not a title yet (a docstring of the old layout)."""
    lines = text.split("\n")
    label = f".. _sphx_glr_{GALLERY}_{stem}.py:"
    if label not in lines:
        return text
    at = lines.index(label) + 1
    while at < len(lines) and not lines[at].strip():
        at += 1
    if at + 1 < len(lines) and TITLE_UNDERLINE.match(lines[at + 1]):
        return text
    if at < len(lines):
        lines[at + 1 : at + 1] = ["=" * len(lines[at]), ""]
    return "\n".join(lines)


def multi_rank_pages(app, env, added, changed, removed) -> list[str]:
    """Read the pages of the multi-rank runs again at every build: a new run does not change their generated rst."""
    return [f"{GALLERY}/{p.stem}" for p in tutorial_files() if selected(p) and tutorial_ranks.ranks(p) is not None]


def setup(app):
    app.connect("builder-inited", run_multi_rank, priority=400)  # before sphinx-gallery's own (500)
    app.connect("source-read", page_source)
    app.connect("env-get-outdated", multi_rank_pages)
    return {"parallel_read_safe": True}
