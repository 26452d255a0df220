"""The sidebar's tree of pages, made once per folder instead of once per page (a Sphinx extension of this site).

Furo's sidebar asks every page for the whole tree of titles (``toctree(titles_only=True, ...)``). Sphinx builds it
by copying every section of every page into it (each documented function is one), then drops all but the titles,
and it does so again for each of the site's ~350 pages: that was most of the build. Two cuts make it cheap:

1. The copy stops at :data:`NAVIGATION_DEPTH`: the same tree, byte for byte.
2. Pages of one folder share one tree, whose links are relative to that folder. A page that is no document (module
   source, the index, search) takes it as it is; a document marks its own entry on a copy, as Sphinx would: the
   classes ``current`` on the entry's link and on every ``<li>`` and ``<ul>`` around it, and its links to itself
   as ``#``.

In each folder, the tree Sphinx makes for one document must equal the one marked here from another's, or the
build stops and names the page: a Sphinx that marks the current page otherwise cannot go unnoticed.

Example (what ``_mark`` does to a shared tree for the page ``guide/b``)::

    <ul><li class="toctree-l1"><a class="reference internal" href="b.html">B</a></li></ul>
    <ul class="current"><li class="toctree-l1 current"><a class="current reference internal" href="#">B</a></li></ul>
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from sphinx.errors import ExtensionError

NAVIGATION_DEPTH = 2
"""Levels of a page's own contents that the sidebar's tree is cut from: its title, and the sections that hold a
toctree (as ``tutorials.rst`` does). Sub-pages are reached through those toctrees at any depth."""

_TREE_TAG = re.compile(r"<(/?)(ul|li)\b([^>]*)>")


def _add_current(open_tag: re.Match) -> str:
    """An opening ``<ul>`` or ``<li>`` tag with ``current`` appended to its classes, as Sphinx appends it."""
    name, attributes = open_tag.group(2), open_tag.group(3)
    classes = re.search(r'class="([^"]*)"', attributes)
    if classes is None:
        return f'<{name} class="current"{attributes}>'
    start, end = classes.span(1)
    return f"<{name}{attributes[:start]}{classes.group(1)} current{attributes[end:]}>"


def _mark(shared: str, own_href: str) -> str:
    """``shared`` (a folder's tree, nothing current) as the page whose link from its folder is ``own_href`` gets it."""
    link = f'<a class="reference internal" href="{own_href}">'
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), applied from the end
    open_tags: list[re.Match] = []
    at = 0
    while (found := shared.find(link, at)) != -1:
        for tag in _TREE_TAG.finditer(shared, at, found):  # the <ul> and <li> still open here hold the entry
            if tag.group(1):
                open_tags.pop()
            else:
                open_tags.append(tag)
        edits += [(tag.start(), tag.end(), _add_current(tag)) for tag in open_tags]
        edits.append((found, found + len(link), '<a class="current reference internal" href="#">'))
        at = found + len(link)
    marked = shared
    for start, end, text in sorted(set(edits), reverse=True):
        marked = marked[:start] + text + marked[end:]
    return marked.replace(f'href="{own_href}#', 'href="#')  # its sections' links, when the tree shows any


def _unmark(own: str, own_href: str) -> str:
    """The tree Sphinx made for a page, with that page's marks taken off: the folder's shared tree."""
    own_link = f'<a class="reference internal" href="{own_href}">'
    shared = own.replace('<a class="current reference internal" href="#">', own_link)
    shared = shared.replace('href="#', f'href="{own_href}#')
    shared = re.sub(r'<(ul|li)([^>]*?) class="current"', r"<\1\2", shared)
    return re.sub(r'(<(?:ul|li)\b[^>]*class="[^"]*?) current"', r'\1"', shared)


_SHARED: dict[tuple, str] = {}
_CHECKED: set[tuple] = set()


def shared_navigation(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """Give the page a ``toctree`` that cuts the tree at :data:`NAVIGATION_DEPTH` and shares it in the folder."""
    toctree = context.get("toctree")
    if toctree is None:
        return
    folder = pagename.rpartition("/")[0]
    document = pagename in app.env.found_docs
    own_href = posixpath.relpath(app.builder.get_target_uri(pagename), folder or ".")

    def folder_tree(**kwargs: Any) -> str:
        if kwargs.get("titles_only"):
            kwargs["maxdepth"] = NAVIGATION_DEPTH
        key = (folder, *sorted(kwargs.items()))
        if key not in _SHARED:
            own = toctree(**kwargs)
            _SHARED[key] = _unmark(own, own_href) if document else own
            return own
        if not document:
            return _SHARED[key]
        marked = _mark(_SHARED[key], own_href)
        if key not in _CHECKED:  # the folder's first document after the one its tree came from
            _CHECKED.add(key)
            if marked != toctree(**kwargs):
                raise ExtensionError(f"shared_sidebar: the tree marked for {pagename} is not Sphinx's own")
        return marked

    context["toctree"] = folder_tree


def setup(app: Any) -> dict:
    app.connect("builder-inited", lambda app: (_SHARED.clear(), _CHECKED.clear()))  # a second build in one process
    app.connect("html-page-context", shared_navigation, priority=400)  # before Furo's handler (500) reads it
    return {"parallel_read_safe": True, "parallel_write_safe": True}  # each writer process keeps its own trees
