"""Sphinx configuration of the nbcoll documentation: ``sphinx-build -W -b html docs docs/_build/html``.

Sphinx, its bundled extensions, sphinx-gallery and the Furo theme (all in nbcoll's ``dev`` extra) are used; the
build fetches nothing from the network. sphinx-gallery makes one page per ``tutorials/*.py``, with its prose, code
and the output of a real run cell by cell, and the thumbnails of ``tutorials.rst``; ``tutorial_gallery.py`` (next
to this file) holds its settings and what the build adds to them, so that a new tutorial appears in the docs
without editing them.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parent.parent

# Autodoc imports the package from this tree, whether or not it is installed.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tutorial_gallery and the other extensions here
# Autodoc only imports modules, and the simulator needs no GPU: the same pages build on every machine.
os.environ.setdefault("NBCOLL_BACKEND", "sim")

from tutorial_gallery import gallery_conf  # noqa: E402  (reads the backend set above)

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
    "sphinx_gallery.gen_gallery",
    "tutorial_gallery",
    "shared_sidebar",
]

sphinx_gallery_conf = gallery_conf()
# The gallery's index is shown by tutorials.rst, which includes it.
exclude_patterns = ["_build", "tutorials/index.rst"]
# Furo: maintained, with a search page and a sidebar search box; it ships its fonts and scripts, no CDN.
html_theme = "furo"
html_title = f"nbcoll {release}"
html_static_path = ["_static"]
html_css_files = ["nbcoll.css"]  # wide figures of the tutorial pages scroll instead of shrinking
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
    app.add_directive("nbcoll-api-group", ApiGroup)
    app.connect("autodoc-skip-member", skip_function_steps_without_docstring)
    # The groups depend on which API pages exist: read the index again at every build.
    app.connect("env-get-outdated", lambda app, env, added, changed, removed: ["api/index"])
    return {"parallel_read_safe": True}
