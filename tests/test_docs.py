"""The Sphinx site builds with warnings as errors, and lists the tutorials and API pages it should.

The build here runs one short tutorial (11, on numpy, a few seconds) through docs/tutorial_pages.py, and shows
the others' code with a note: the full build, which runs them all, is ``sphinx-build -W -b html docs OUT``.
It reads and writes pages in one process per core (``-j auto``): the extensions of the site say they may, and one
process took half as long again for the ~350 pages.
"""

import html as html_module
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote

import pytest

# sphinx.application, not sphinx: a Python can hold a bare "sphinx" namespace folder (another package's files)
# with no Sphinx behind it, which imports without error.
pytest.importorskip("sphinx.application", reason="Sphinx is not installed (pip install -e '.[dev]' installs it)")
pytest.importorskip("furo", reason="the Furo theme is not installed (pip install -e '.[dev]' installs it)")

DOCS = Path(__file__).resolve().parent.parent / "docs"
TUTORIALS = DOCS.parent / "tutorials"
EXECUTED = "11_autograd_from_scratch"


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    env = dict(os.environ, NBCOLL_DOCS_EXECUTE=EXECUTED[:2], NBCOLL_DOCS_CACHE=str(out / "tutorial_runs"))
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-j", "auto", "-W", "--keep-going", "-b", "html", "-d", str(out / "doctrees")]
        + [str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, "sphinx-build -W failed:\n" + proc.stderr[-6000:] + proc.stdout[-2000:]
    return out / "html"


def test_docs_build_with_warnings_as_errors(html):
    assert (html / "index.html").is_file()
    for page in ("guide/backends", "guide/kernels", "guide/command_line", "tutorials"):
        assert (html / f"{page}.html").is_file(), page


ERROR_BOXES = {
    'class="system-message': "a docutils system message (an error or warning written into the page)",
    'class="problematic': "docutils' mark of markup it could not read",
    'class="contents': "a `.. contents::` table, which Furo draws as a red box (its sidebar already lists the page)",
}
"""What a built page must not hold: the start of the HTML class each box has (Furo leaves a ``contents`` box
alone only when it carries the class ``this-will-duplicate-information-and-it-is-still-useful-here``)."""


def error_boxes(html_root: Path) -> list[str]:
    """``"page: what"`` for each built page that holds one of :data:`ERROR_BOXES`."""
    found = []
    for page in sorted(html_root.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        for marker, what in ERROR_BOXES.items():
            hits = [m.start() for m in re.finditer(re.escape(marker), text)]
            if any("this-will-duplicate-information" not in text[i : text.find('"', i + len(marker))] for i in hits):
                found.append(f"{page.relative_to(html_root).as_posix()}: {what}")
    return found


def test_no_page_shows_an_error_or_warning_box(html):
    boxes = error_boxes(html)
    assert not boxes, f"{len(boxes)} boxes:\n" + "\n".join(boxes[:40])


def test_the_box_check_finds_a_system_message_and_a_contents_table(tmp_path):
    wanted = "this-will-duplicate-information-and-it-is-still-useful-here"  # Furo leaves such a table alone
    (tmp_path / "ok.html").write_text(f'<nav class="contents {wanted}">')
    (tmp_path / "a.html").write_text('<aside class="system-message"><p class="system-message-title">x</p></aside>')
    (tmp_path / "b.html").write_text('<nav class="contents local" id="on-this-page"><p class="topic-title">On')
    found = error_boxes(tmp_path)
    assert [line.split(":")[0] for line in found] == ["a.html", "b.html"], found
    assert "system message" in found[0] and "red box" in found[1]


def test_every_numbered_tutorial_is_listed_with_its_summary(html):
    page = (html / "tutorials.html").read_text(encoding="utf-8")
    tutorials = sorted(TUTORIALS.glob("[0-9][0-9]_*.py"))
    assert tutorials, "no tutorials found"
    for path in tutorials:
        assert f"tutorials/{path.name}" in page, path.name
    assert "Your first CUDA kernel" in page


def test_api_pages_document_their_modules(html):
    for module in ("nbcoll", "nbcoll.backend", "nbcoll.memory", "nbcoll.kernels.elementwise", "nbcoll.info"):
        page = (html / "api" / f"{module}.html").read_text(encoding="utf-8")
        assert f'id="module-{module}"' in page, module
    elementwise = (html / "api" / "nbcoll.kernels.elementwise.html").read_text(encoding="utf-8")
    assert 'id="nbcoll.kernels.elementwise.unary"' in elementwise


def test_guide_excerpts_come_from_the_source(html):
    kernels = (html / "guide" / "kernels.html").read_text(encoding="utf-8")
    for name in ("unary_reference", "offset_of", "launch_1d", "where_kernel"):
        assert name in kernels, name


def page_text(path: Path) -> str:
    """The visible text of a built page's article, tags removed."""
    html = path.read_text(encoding="utf-8")
    article = html[html.index("<article") :]
    return re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", article)))


def test_every_tutorial_has_a_page_with_its_code(html):
    for path in sorted(TUTORIALS.glob("[0-9][0-9]_*.py")):
        page = html / "tutorials" / f"{path.stem}.html"
        assert page.is_file(), path.name
        text = page_text(page)
        sections = ("What you will learn", "Run it", "Output", "The code", "What to try next")
        positions = [text.find(section) for section in sections]
        assert -1 not in positions and positions == sorted(positions), (path.name, positions)
        # The page opens with what the reader will learn (not an empty heading) and ends with where to go next.
        learn = text[positions[0] + len(sections[0]) : positions[1]]
        assert len(learn.split()) >= 20, (path.name, learn)
        ending = text[positions[-1] :]
        assert "Go on to the next tutorial" in ending or "exercises" in ending.lower(), (path.name, ending[:300])


def test_one_tutorial_is_executed_and_its_real_output_shown(html):
    text = page_text(html / "tutorials" / f"{EXECUTED}.html")
    assert "Run when this site was built, on the numpy backend: it finished" in text
    assert "Tutorial 11 on the 'numpy' backend" in text  # printed by the run; the code has an f-string there
    assert "1. Forward pass by hand" in text
    # The others are not run by this build: their pages say so instead of showing stale output.
    assert "did not run the tutorial" in page_text(html / "tutorials" / "01_first_kernel.html")


def sidebar(page: Path) -> str:
    html = page.read_text(encoding="utf-8")
    start = html.index('<div class="sidebar-tree">')
    return html[start : html.index("</aside>", start)]


def test_every_page_has_the_whole_sidebar_with_links_from_its_own_folder(html):
    # The build cuts the sidebar's tree short and shares it among the pages of a folder (docs/shared_sidebar.py)
    pages = {  # page -> the way from its folder to a tutorial's, and to an API page
        html / "tutorials" / f"{EXECUTED}.html": ("", "../api/"),
        html / "_modules" / "nbcoll" / "comm" / "ll.html": ("../../../tutorials/", "../../../api/"),
        html / "_modules" / "index.html": ("../tutorials/", "../api/"),
        html / "genindex.html": ("tutorials/", "api/"),
    }
    for page, (to_tutorials, to_api) in pages.items():
        tree = sidebar(page)
        for path in sorted(TUTORIALS.glob("[0-9][0-9]_*.py")):
            if path.stem != page.stem:  # the page itself is linked as "#"
                assert f'href="{to_tutorials}{path.stem}.html"' in tree, (page, path.name)
        assert f'href="{to_api}nbcoll.comm.ll.html"' in tree, page
        assert ("current-page" in tree) == (page.parent.name == "tutorials"), page


SHARED_TREE = (
    '<p class="caption"><span>Guide</span></p>\n<ul>\n'
    '<li class="toctree-l1"><a class="reference internal" href="a.html">A</a>'
    '<ul>\n<li class="toctree-l2"><a class="reference internal" href="b.html">B</a></li>\n'
    '<li class="toctree-l2"><a class="reference internal" href="b.html#part">Part</a></li>\n</ul>\n</li>\n'
    '<li class="toctree-l1"><a class="reference internal" href="c.html">C</a></li>\n</ul>\n'
)


def test_a_shared_sidebar_tree_is_marked_for_each_page_as_sphinx_marks_it(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))
    import shared_sidebar

    marked = shared_sidebar._mark(SHARED_TREE, "b.html")
    assert marked == (
        '<p class="caption"><span>Guide</span></p>\n<ul class="current">\n<li class="toctree-l1 current">'
        '<a class="reference internal" href="a.html">A</a><ul class="current">\n'
        '<li class="toctree-l2 current"><a class="current reference internal" href="#">B</a></li>\n'
        '<li class="toctree-l2"><a class="reference internal" href="#part">Part</a></li>\n</ul>\n</li>\n'
        '<li class="toctree-l1"><a class="reference internal" href="c.html">C</a></li>\n</ul>\n'
    )
    for page in ("a.html", "b.html", "c.html"):
        assert shared_sidebar._unmark(shared_sidebar._mark(SHARED_TREE, page), page) == SHARED_TREE
    assert shared_sidebar._mark(SHARED_TREE, "elsewhere.html") == SHARED_TREE  # not in the tree: nothing current


def test_a_shared_sidebar_tree_that_differs_from_sphinx_own_stops_the_build(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))
    import shared_sidebar
    from sphinx.errors import ExtensionError

    class Builder:
        def get_target_uri(self, pagename):
            return pagename + ".html"

    class App:
        builder, env = Builder(), type("Env", (), {"found_docs": {"guide/a", "guide/b"}})()

    monkeypatch.setattr(shared_sidebar, "_SHARED", {})
    monkeypatch.setattr(shared_sidebar, "_CHECKED", set())
    sphinx_trees = {"guide/a": shared_sidebar._mark(SHARED_TREE, "a.html"), "guide/b": SHARED_TREE}  # b: unmarked
    contexts = {page: {"toctree": lambda tree=tree, **kwargs: tree} for page, tree in sphinx_trees.items()}
    for page, context in contexts.items():
        shared_sidebar.shared_navigation(App(), page, "page.html", context, None)
    assert contexts["guide/a"]["toctree"](titles_only=True) == sphinx_trees["guide/a"]  # the folder's first: Sphinx's
    with pytest.raises(ExtensionError, match="the tree marked for guide/b is not Sphinx's own"):
        contexts["guide/b"]["toctree"](titles_only=True)


def test_api_reference_is_grouped_by_layer(html):
    text = page_text(html / "api" / "index.html")
    groups = ["Backends, memory and kernels", "Tensors and autograd", "Communicators and collectives"]
    groups += ["Layers, optimizers and data", "Parallel training", "Tools: launching, measuring, testing"]
    positions = [text.index(group) for group in groups]
    assert positions == sorted(positions)
    assert text.index("nbcoll.kernels.elementwise") < text.index("Tensors and autograd")
    assert groups[2] in text[: text.index("nbcoll.comm.tuner")]


def test_index_starts_where_the_readme_does(html):
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "python tutorials/08_ring_all_reduce.py" in readme
    text = page_text(html / "index.html")
    assert "python tutorials/08_ring_all_reduce.py" in text
    for page in ("getting_started", "concepts", "glossary", "benchmarks", "howto/debug_a_hang", "search"):
        assert (html / f"{page}.html").is_file(), page


def test_tutorial_runs_are_selected_and_their_output_cleaned(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))
    import tutorial_pages

    [first] = [t for t in tutorial_pages.tutorials() if t.number == "01"]
    assert tutorial_pages.selected(first, "1") and tutorial_pages.selected(first, "")
    assert not tutorial_pages.selected(first, "0")
    assert tutorial_pages.selected(first, "11, 01") and not tutorial_pages.selected(first, "11")
    assert tutorial_pages.selected(first, first.name)
    figures = Path("/somewhere/figures")
    raw = "a\x1b[1mb\x1b[0m\nloss:  40%|####  | 2/5\rloss: 100%|#####| 5/5\n\n\n" + f"saved {figures}/x.png\n"
    assert tutorial_pages.clean_output(raw, figures) == "ab\n\nsaved $NBCOLL_FIGURES_DIR/x.png"


HREF = re.compile(r' href="([^"]*)"')
ID = re.compile(r' id="([^"]*)"')


def broken_internal_links(html_root: Path) -> list[str]:
    """Every ``href`` of the built site that points inside it, checked: the file exists and, when the link
    names an anchor (``page.html#name``), the page has an element with that id. Links with a scheme
    (``https:``, ``mailto:``) leave the site and are not checked. Returns ``"page: href (why)"`` per broken link.
    """
    files = {path.relative_to(html_root).as_posix() for path in html_root.rglob("*") if path.is_file()}
    texts = {name: (html_root / name).read_text(encoding="utf-8") for name in files if name.endswith(".html")}
    ids: dict[str, set[str]] = {}
    broken = []
    for page in sorted(texts):
        folder = posixpath.dirname(page)
        for match in HREF.finditer(texts[page]):
            href = html_module.unescape(match.group(1)).strip()
            if not href or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", href):
                continue
            path, _, fragment = href.partition("#")
            target = posixpath.normpath(posixpath.join(folder, unquote(path.split("?", 1)[0]))) if path else page
            if target not in files and posixpath.join(target, "index.html") in files:
                target = posixpath.join(target, "index.html")
            if target not in files:
                broken.append(f"{page}: {href} (no such file)")
            elif fragment and target in texts:
                if target not in ids:
                    ids[target] = {html_module.unescape(m.group(1)) for m in ID.finditer(texts[target])}
                if unquote(fragment) not in ids[target]:
                    broken.append(f"{page}: {href} (no id {fragment!r} in {target})")
    return broken


def test_internal_links_resolve(html):
    broken = broken_internal_links(html)
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:40])


def test_the_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text('<p id="here"></p><a href="#here">ok</a><a href="b.html#gone">x</a>')
    (tmp_path / "b.html").write_text('<a href="a.html#here">ok</a><a href="c.html">y</a><a href="https://x.org/">z</a>')
    assert broken_internal_links(tmp_path) == [
        "a.html: b.html#gone (no id 'gone' in b.html)",
        "b.html: c.html (no such file)",
    ]


# ---------------------------------------------------------------------------------------------------------------
# The built site in a real headless browser: Debian's chromium, started here, nothing downloaded.

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)


def rendered_text(page: Path, query: str = "") -> str:
    """The text of ``page`` once chromium has loaded it and run its scripts (the search runs in JavaScript)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the browser checks are skipped")
    with tempfile.TemporaryDirectory(prefix="nbcoll-chromium-") as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
            + ["--virtual-time-budget=10000", "--dump-dom", page.as_uri() + query],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", proc.stdout, flags=re.S)
    return re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", dom)))


def test_browser_shows_the_home_page_a_tutorial_and_an_api_page(html):
    assert "Start here" in rendered_text(html / "index.html")
    tutorial = rendered_text(html / "tutorials" / f"{EXECUTED}.html")
    assert "What you will learn" in tutorial and "1. Forward pass by hand" in tutorial
    api = rendered_text(html / "api" / "nbcoll.kernels.elementwise.html")
    assert re.search(r"nbcoll\.kernels\.elementwise\.\s*unary\s*\(", api), api[:2000]  # the signature's parts


def test_browser_search_finds_all_reduce(html):
    text = rendered_text(html / "search.html", "?q=all_reduce")
    found = re.search(r"found (\d+) page", text)
    assert found and int(found.group(1)) > 0, text[-2000:]
    assert "nbcoll.comm.collectives" in text


def test_a_tutorial_that_picks_numpy_for_itself_is_run_on_numpy_by_the_build(monkeypatch):
    """The site shows the run a reader gets: a tutorial whose plain run defaults to numpy is built on numpy."""
    monkeypatch.syspath_prepend(str(DOCS))
    import tutorial_pages

    defaults_to_numpy = re.compile(r"""environ\.get\(\s*["']NBCOLL_BACKEND["']\s*,\s*["']numpy["']\s*\)""")
    chosen = [t for t in tutorial_pages.tutorials() if defaults_to_numpy.search(t.path.read_text(encoding="utf-8"))]
    assert chosen, "no tutorial defaults to numpy any more: drop this test"
    for tutorial in chosen:
        assert tutorial.backend == "numpy", tutorial.name


def test_a_new_run_or_page_layout_changes_the_stub_so_the_page_is_read_again(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))
    import tutorial_pages

    tutorial_pages.write_stubs(None)
    [first] = [t for t in tutorial_pages.tutorials() if t.number == "01"]
    stub = (tutorial_pages.PAGES / f"{first.name}.rst").read_text(encoding="utf-8")
    assert f".. run {first.digest()}, layout " in stub  # the digest holds the tutorial, its backend and RUN_FORMAT


def test_ci_runs_exactly_the_readme_test_command_which_the_docs_repeat():
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    install, test = readme.split("```bash\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert install.startswith("pip install -e") and test.startswith("python -m pytest")
    ci = (DOCS.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if "pytest " in line and not line.startswith("#")] == [test]
    for page in ("index.rst", "getting_started.rst"):
        assert test in (DOCS / page).read_text(encoding="utf-8"), page
