"""Sphinx configuration of the nbcoll documentation: ``sphinx-build -W -b html docs docs/_build/html``.

Sphinx, its bundled extensions and the Furo theme (all in nbcoll's ``dev`` extra) are used; the build fetches
nothing from the network. The ``nbcoll-tutorials`` directive defined here lists ``tutorials/*.py`` with the first
line of each module docstring, and ``tutorial_pages.py`` (next to this file) gives each tutorial a page with its
code and the output of a real run, so that a new tutorial appears in the docs without editing them.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import os
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"

# Autodoc imports the package from this tree, whether or not it is installed.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tutorial_pages, this folder's extension
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
    "tutorial_pages",
    "shared_sidebar",
]

exclude_patterns = ["_build", "tutorials/_figures"]
# Furo: maintained, with a search page and a sidebar search box; it ships its fonts and scripts, no CDN.
html_theme = "furo"
html_title = f"nbcoll {release}"
html_static_path: list[str] = []
html_theme_options = {"navigation_with_keys": True}
nitpicky = False

# Source links only from the module that defines an object: following a name re-exported by a package (the
# ``nbcoll`` page documents ``nbcoll.use_backend``) made the source pages link back to anchors that do not exist.
viewcode_follow_imported_members = False

autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
# torch is an optional extra: without it, the pages of nbcoll.torch_backend are built against a stand-in module.
if importlib.util.find_spec("torch") is None:
    autodoc_mock_imports = ["torch"]
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
            # A link to the tutorial's own page (made by tutorial_pages), its file name as the text.
            link = addnodes.pending_xref(
                "",
                refdomain="std",
                reftype="doc",
                reftarget=f"/tutorials/{path.stem}",
                refexplicit=True,
                refdoc=self.env.docname,
            )
            link += nodes.literal(text=f"tutorials/{path.name}")
            paragraph += link
            if summary:
                paragraph += nodes.Text(f": {summary}")
            items += nodes.list_item("", paragraph)
        return [items]


# ---------------------------------------------------------------------------------------------------------------
# The API reference, grouped by layer.


class ApiGroup(SphinxDirective):
    """``.. nbcoll-api-group::`` with module patterns as content (``nbcoll.comm*``): a toctree of the pages
    ``api/<module>.rst`` that match, in name order.

    A new module's page lands in the group whose pattern it matches; a page that matches none is reported by
    Sphinx as not included in any toctree, which ``-W`` turns into an error. A group none of whose patterns
    matches a page yet says so instead of failing, so that groups can be listed before their modules exist.
    """

    has_content = True

    def run(self) -> list[nodes.Node]:
        patterns = [line.strip() for line in self.content if line.strip()]
        pages = sorted(
            name
            for name in self.env.found_docs
            if name.startswith("api/") and any(fnmatch.fnmatchcase(name[len("api/") :], p) for p in patterns)
        )
        if not pages:
            return [nodes.paragraph(text="No module in this layer yet.")]
        lines = [".. toctree::", "   :maxdepth: 1", "", *(f"   /{page}" for page in pages)]
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=self.get_source_info()[0]), self.content_offset, container)
        return container.children


def skip_function_steps_without_docstring(app, what, name, obj, skip, options):
    """Leave out ``forward`` and ``backward`` of a ``Function`` subclass when they have no docstring of their own.

    They would show the base class's example under a signature of device arrays, which teaches nothing the
    class docstring does not; None lets autodoc decide every other member.
    """
    from nbcoll.tensors.function import Function

    owner = getattr(obj, "__qualname__", "").rpartition(".")[0]
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    cls = getattr(module, owner, None) if owner and "." not in owner else None
    if name in ("forward", "backward") and isinstance(cls, type) and issubclass(cls, Function):
        if cls is not Function and not getattr(obj, "__doc__", None):
            return True
    return None


def setup(app):
    app.add_directive("nbcoll-tutorials", TutorialList)
    app.add_directive("nbcoll-api-group", ApiGroup)
    app.connect("autodoc-skip-member", skip_function_steps_without_docstring)
    # The groups depend on which API pages exist: read the index again at every build.
    app.connect("env-get-outdated", lambda app, env, added, changed, removed: ["api/index"])
    return {"parallel_read_safe": True}
