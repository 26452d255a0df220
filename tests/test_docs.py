"""The Sphinx site builds with warnings as errors, and lists the tutorials and API pages it should."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="sphinx is not installed (pip install -e '.[dev]' installs it)")

DOCS = Path(__file__).resolve().parent.parent / "docs"
TUTORIALS = DOCS.parent / "tutorials"


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-d", str(out / "doctrees")]
        + [str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, "sphinx-build -W failed:\n" + proc.stderr[-6000:] + proc.stdout[-2000:]
    return out / "html"


def test_docs_build_with_warnings_as_errors(html):
    assert (html / "index.html").is_file()
    for page in ("guide/backends", "guide/kernels", "guide/command_line", "tutorials"):
        assert (html / f"{page}.html").is_file(), page


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
