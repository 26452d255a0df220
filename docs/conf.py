"""Sphinx configuration of the nbcoll documentation: ``sphinx-build -W -b html docs docs/_build/html``.

Only Sphinx and its bundled extensions are used, so the site builds wherever nbcoll's ``dev`` extra is installed.
The ``nbcoll-tutorials`` directive defined here lists ``tutorials/*.py`` with the first line of each module
docstring, so that a new tutorial appears in the docs without editing them.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"

# Autodoc imports the package from this tree, whether or not it is installed.
sys.path.insert(0, str(ROOT))
# Autodoc only imports modules, and the simulator needs no GPU: the same pages build on every machine.
os.environ.setdefault("NBCOLL_BACKEND", "sim")

import nbcoll  # noqa: E402  (after the path and the backend are set)

project = "nbcoll"
author = "the nbcoll authors"
copyright = "the nbcoll authors"
release = nbcoll.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
nitpicky = False

autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = True


# ---------------------------------------------------------------------------------------------------------------
# The list of tutorials, read from the files themselves.


def tutorial_files(directory: Path = TUTORIALS) -> list[Path]:
    """The numbered tutorials, ``NN_name.py``, in order."""
    return sorted(path for path in directory.glob("[0-9][0-9]_*.py") if path.is_file())


def first_docstring_line(path: Path) -> str:
    """The first non-empty line of the module docstring of ``path``, read without running the file."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    lines = [line.strip() for line in docstring.splitlines() if line.strip()]
    return lines[0] if lines else ""


class TutorialList(SphinxDirective):
    """``.. nbcoll-tutorials::`` becomes a bullet list: one item per tutorial, its file name and summary."""

    def run(self) -> list[nodes.Node]:
        files = tutorial_files()
        if not files:
            return [nodes.paragraph(text="No tutorials yet.")]
        items = nodes.bullet_list()
        for path in files:
            # Rebuild this page when a tutorial changes.
            self.env.note_dependency(str(path))
            summary = first_docstring_line(path)
            paragraph = nodes.paragraph()
            paragraph += nodes.literal(text=f"tutorials/{path.name}")
            if summary:
                paragraph += nodes.Text(f": {summary}")
            items += nodes.list_item("", paragraph)
        return [items]


def setup(app):
    app.add_directive("nbcoll-tutorials", TutorialList)
    return {"parallel_read_safe": True}
