"""The Sphinx site builds with warnings as errors: sphinx-gallery's tutorial pages, the API pages, the guide.

The build here runs two short tutorials: 11 inside the build, as sphinx-gallery runs a tutorial, and 08 on its
4 ranks beside it (docs/tutorial_ranks.py), both on numpy (a few seconds each); the other pages show prose and
code without output. The full build, which runs them all, is ``sphinx-build -W -b html docs OUT``. It reads and
writes pages in one process per core (``-j auto``): the extensions of the site say they may, and one process took
half as long again for the ~350 pages.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import (
    article,
    blocks,
    broken_internal_links,
    error_boxes,
    measured,
    page_text,
    rendered_text,
    screenshot,
)

# sphinx.application, not sphinx: a Python can hold a bare "sphinx" namespace folder (another package's files)
# with no Sphinx behind it, which imports without error.
pytest.importorskip("sphinx.application", reason="Sphinx is not installed (pip install -e '.[dev]' installs it)")
pytest.importorskip("furo", reason="the Furo theme is not installed (pip install -e '.[dev]' installs it)")
pytest.importorskip("sphinx_gallery", reason="sphinx-gallery is not installed (pip install -e '.[dev]' installs it)")

DOCS = Path(__file__).resolve().parent.parent / "docs"
TUTORIALS = DOCS.parent / "tutorials"
EXECUTED = "11_autograd_from_scratch"
RANKED = "08_ring_all_reduce"
SCREENSHOTS = DOCS / "_build" / "screenshots"
"""Where the browser checks leave pictures of three pages (ignored by git; CI may keep them as artifacts)."""


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    # sphinx-gallery skips a tutorial whose page it made from the same file before, output and all: without
    # its checksums, every page here is made by this build (others' runs of a full build do not show).
    for checksum in (DOCS / "tutorials").glob("*.md5"):
        checksum.unlink()
    env = dict(os.environ, NBCOLL_DOCS_EXECUTE=f"{EXECUTED[:2]},{RANKED}", NBCOLL_DOCS_CACHE=str(out / "runs"))
    env["NBCOLL_BACKEND"] = "numpy"  # the build's backend: 08 runs on it (11 chooses numpy itself)
    env["NBCOLL_DOCS_TIMEOUT"] = "300"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-j", "auto", "-W", "--keep-going", "-b", "html", "-d", str(out / "doctrees")]
        + [str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 0, "sphinx-build -W failed:\n" + proc.stderr[-6000:] + proc.stdout[-2000:]
    return out / "html"


def test_docs_build_with_warnings_as_errors(html):
    assert (html / "index.html").is_file()
    for page in ("guide/backends", "guide/kernels", "guide/command_line", "tutorials", f"tutorials/{RANKED}"):
        assert (html / f"{page}.html").is_file(), page


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


def test_the_tutorials_page_shows_a_thumbnail_for_every_tutorial_in_order(html):
    page = article(html / "tutorials.html")
    thumbnails = re.findall(r'<div class="sphx-glr-thumbcontainer".*?href="tutorials/(\d\d_\w+)\.html"', page, re.S)
    assert thumbnails == [path.stem for path in sorted(TUTORIALS.glob("[0-9][0-9]_*.py"))]
    assert "Your first CUDA kernel" in page_text(html / "tutorials.html")
    # 08 drew a picture, and its thumbnail is made from it; 01 did not run here, and has sphinx-gallery's default.
    drawn, default = (html / "_images" / f"sphx_glr_{name}_thumb.png" for name in (RANKED, "01_first_kernel"))
    assert drawn.read_bytes() != default.read_bytes()
    assert "tutorials_python.zip" in page and "tutorials_jupyter.zip" in page  # every script, every notebook


def test_every_tutorial_page_interleaves_prose_code_and_output(html):
    for path in sorted(TUTORIALS.glob("[0-9][0-9]_*.py")):
        layout = blocks(html / "tutorials" / f"{path.stem}.html")  # T text, C code, O output
        if path.stem in (EXECUTED, RANKED):
            assert re.fullmatch(r"(T+CO+)+T*", layout) and layout.count("C") >= 5, (path.name, layout)
        elif "\n# %%" in path.read_text(encoding="utf-8"):  # cut into cells
            assert re.fullmatch(r"(T+C)+T*", layout) and layout.count("C") >= 2, (path.name, layout)
        else:  # not cut into cells yet: one cell
            assert re.fullmatch(r"T+CT*", layout), (path.name, layout)
        text = page_text(html / "tutorials" / f"{path.stem}.html")
        assert f"Download Python source code: {path.name}" in text and "Download Jupyter notebook" in text, path


def cell(text: str, heading: str, following: str) -> str:
    """The text of a page from one cell's heading to the next one's."""
    return text[text.index(heading) : text.index(following)]


def test_tutorial_11_runs_in_the_build_on_numpy_and_each_cell_shows_what_it_printed(html):
    text = page_text(html / "tutorials" / f"{EXECUTED}.html")
    assert "Tutorial 11 on the 'numpy' backend" in cell(text, "Set-up and the network", "1. The forward pass by hand")
    forward = cell(text, "1. The forward pass by hand", "2. Backward by hand")
    assert forward.index("math . tanh") < forward.index("L = (y - target)^2 = ")  # the code, then its output
    assert "gradcheck(network, [W1, b1, w2, b2]) = True" in text[text.index("5. gradcheck against") :]
    assert "Total running time of the script" in text


def test_tutorial_08_runs_on_its_4_ranks_and_each_cell_shows_every_rank(html):
    text = page_text(html / "tutorials" / f"{RANKED}.html")
    steps = cell(text, "Every step, on every rank", "3. What it cost")
    assert steps.index("enumerate ( steps )") < steps.index("step 0 (reduce-scatter, round 0)")
    assert "rank 1 buffer: 1111 1111 1111 1111 1111 1111 1111 1111 1111 1111" in steps
    others = steps[steps.index("Ranks 1-3") :]
    assert [f"rank {r}: step-by-step ring all-reduce matches NumPy: ok" in others for r in (1, 2, 3)] == [True] * 3
    traced = cell(text, "4. The same collective through", "The end")
    assert "drawn to $NBCOLL_FIGURES_DIR/ring_all_reduce.png" in traced  # no path of the machine that built it
    assert "ring_all_reduce.png : #1 all_reduce (ring) on 4 ranks" in traced  # the caption: the figure's title
    figure = re.search(r'<img alt="([^"]*)"[^>]*src="../_images/(sphx_glr_08_ring_all_reduce_001.png)"', article(
        html / "tutorials" / f"{RANKED}.html"))  # fmt: skip
    assert figure and figure.group(1) == "#1 all_reduce (ring) on 4 ranks", figure
    assert "rank 3: Done: ok" in text[text.index("The end") :]
    assert "Run on 4 ranks, on the numpy backend, when this site was built: finished in" in text


def test_which_tutorials_run_is_chosen_like_nbcoll_docs_execute_says(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))
    import tutorial_gallery

    first, ranked = TUTORIALS / "01_first_kernel.py", TUTORIALS / f"{RANKED}.py"
    assert tutorial_gallery.selected(first, "1") and tutorial_gallery.selected(first, "")
    assert not tutorial_gallery.selected(first, "0")
    assert tutorial_gallery.selected(first, "11, 01") and not tutorial_gallery.selected(first, "11")
    assert tutorial_gallery.selected(ranked, RANKED) and tutorial_gallery.selected(ranked, "8,08")
    for setting, runs_here, pattern_finds in (("1", True, [first]), ("0", False, []), (f"11,{RANKED}", True, [])):
        monkeypatch.setenv("NBCOLL_DOCS_EXECUTE", setting)
        conf = tutorial_gallery.gallery_conf()
        assert bool(eval(str(conf["plot_gallery"]))) is runs_here, setting
        found = [p for p in (first, ranked) if re.search(conf["filename_pattern"], str(p))]
        assert found == pattern_finds, setting  # 08 is never sphinx-gallery's to run: it runs on its ranks
        assert re.search(conf["filename_pattern"], str(TUTORIALS / f"{EXECUTED}.py")) or setting == "0"


def test_a_tutorial_that_picks_numpy_for_itself_is_run_on_numpy_by_the_build(monkeypatch):
    """The site shows the run a reader gets: a tutorial whose plain run defaults to numpy is built on numpy."""
    monkeypatch.syspath_prepend(str(DOCS))
    import tutorial_gallery

    defaults_to_numpy = re.compile(r"""environ\.get\(\s*["']NBCOLL_BACKEND["']\s*,\s*["']numpy["']\s*\)""")
    chosen = [p for p in tutorial_gallery.tutorial_files() if defaults_to_numpy.search(p.read_text(encoding="utf-8"))]
    assert chosen, "no tutorial defaults to numpy any more: drop this test"
    for path in chosen:
        assert tutorial_gallery.backend_of(path) == "numpy", path.name


PAGE = """.. _sphx_glr_tutorials_99_x.py:

Old layout: a docstring whose first line has no underline

.. GENERATED FROM PYTHON SOURCE LINES 5-8

.. code-block:: Python

    print("a")

.. GENERATED FROM PYTHON SOURCE LINES 9-12

Next
----

.. GENERATED FROM PYTHON SOURCE LINES 13-14

.. code-block:: Python

    print("b")

.. _sphx_glr_download_tutorials_99_x.py:
"""


def test_each_cell_gets_the_output_its_ranks_wrote_after_their_marker(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(DOCS))
    import tutorial_gallery
    from tutorial_cells import CELL_MARKER, FIGURE_MARKER
    from tutorial_ranks import insert_outputs

    (tmp_path / "figures").mkdir()
    (tmp_path / "status").write_text("0 3.2\n")
    (tmp_path / "backend").write_text("numpy")
    (tmp_path / "rank0.txt").write_text(f"{CELL_MARKER}5\na\x1b[1m!\x1b[0m\n{CELL_MARKER}13\nb\n")
    (tmp_path / "rank1.txt").write_text(f"{CELL_MARKER}5\n{CELL_MARKER}13\nloss: 50%|##\rrank 1 says b\n")
    (tmp_path / "rank2.txt").write_text(f"{CELL_MARKER}5\n{FIGURE_MARKER}p.png\tLoss\n{CELL_MARKER}13\nhi\n")
    page = insert_outputs(PAGE, tmp_path, "tutorials", "99_x", 3).split("\n")
    first, second = page.index("    a!"), page.index("    b")
    assert page.index('    print("a")') < first < page.index("Next") < page.index('    print("b")') < second
    assert page[page.index("    :caption: Ranks 1-2") :][2:4] == ["    rank 1 says b", "    [rank 2] hi"]
    figure = page.index(".. figure:: /tutorials/images/sphx_glr_99_x_001.png")
    assert first < figure < page.index("Next") and "   :alt: Loss" in page[figure : figure + 3]
    assert "Run on 3 ranks, on the numpy backend, when this site was built:** finished" in "\n".join(page)
    titled = tutorial_gallery.add_missing_title(PAGE, "99_x").split("\n")
    assert titled[2:4] == ["Old layout: a docstring whose first line has no underline", "=" * 57]
    assert tutorial_gallery.add_missing_title("\n".join(titled), "99_x") == "\n".join(titled)  # once only


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


def test_browser_shows_the_home_page_and_an_api_page(html):
    assert "Start here" in rendered_text(html / "index.html")
    api = rendered_text(html / "api" / "nbcoll.kernels.elementwise.html")
    assert re.search(r"nbcoll\.kernels\.elementwise\.\s*unary\s*\(", api), api[:2000]  # the signature's parts


def test_browser_shows_every_thumbnail_of_the_tutorials_page(html):
    images = [image for image in measured(html / "tutorials.html")["images"] if image["src"].endswith("_thumb.png")]
    assert len(images) == len(list(TUTORIALS.glob("[0-9][0-9]_*.py")))
    assert all(image["loaded"] and image["shown"] >= 100 for image in images), images


def test_browser_shows_a_tutorial_cell_by_cell_its_figure_legible_and_its_step_table_unscrolled(html):
    page = html / "tutorials" / f"{RANKED}.html"
    found = measured(page)
    [figure] = [image for image in found["images"] if RANKED in image["src"] and "thumb" not in image["src"]]
    # Shown at least two thirds of its own size, so that its labels (drawn for that size) can be read.
    assert figure["loaded"] and figure["natural"] <= 1.5 * figure["shown"], figure
    [table] = [pre for pre in found["pres"] if pre["text"].startswith("   step 0 (reduce-scatter")]
    for box in (table["pre"], table["parent"]):
        assert box["scroll"] <= box["client"], table  # no horizontal scrolling
    text = " ".join(found["text"].split())
    assert text.index("Every step, on every rank") < text.index("step 0 (reduce-scatter") < text.index("Ranks 1-3")


def test_browser_search_finds_all_reduce(html):
    text = rendered_text(html / "search.html", "?q=all_reduce")
    found = re.search(r"found (\d+) page", text)
    assert found and int(found.group(1)) > 0, text[-2000:]
    assert "nbcoll.comm.collectives" in text


def test_browser_screenshots_of_the_home_tutorials_and_08_pages(html):
    pages = {
        "home": html / "index.html",
        "tutorials": html / "tutorials.html",
        RANKED: html / "tutorials" / f"{RANKED}.html",
    }
    for name, page in pages.items():  # the tutorial's picture is tall enough to reach its step table
        assert screenshot(page, SCREENSHOTS / f"{name}.png", 3200 if name == RANKED else 1600).stat().st_size > 10_000


def test_ci_runs_exactly_the_readme_test_command_which_the_docs_repeat():
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    install, test = readme.split("```bash\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert install.startswith("pip install -e") and test.startswith("python -m pytest")
    ci = (DOCS.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if "pytest " in line and not line.startswith("#")] == [test]
    for page in ("index.rst", "getting_started.rst"):
        assert test in (DOCS / page).read_text(encoding="utf-8"), page
