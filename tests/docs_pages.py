"""Reading the built docs: page text, error boxes, internal links, and the pages as headless Chromium draws them."""

import html as html_module
import json
import posixpath
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import unquote

import pytest

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


def article(path: Path) -> str:
    """The HTML of a built page's article."""
    html = path.read_text(encoding="utf-8")
    return html[html.index("<article") : html.index("</article>")]


def visible(html: str) -> str:
    """Text as a reader sees it: tags removed, entities decoded, white space collapsed."""
    return re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", html)))


def page_text(path: Path) -> str:
    """The visible text of a built page's article."""
    return visible(article(path))


BLOCK = re.compile(
    r'<h[1-6]|<p\b|<div class="highlight-Python notranslate">|<div class="[^"]*sphx-glr-script-out|<figure'
)


def blocks(path: Path) -> str:
    """A tutorial page as a string of letters in reading order: ``T`` text (a heading or a paragraph), ``C`` a
    cell's code, ``O`` output (what a cell printed, or a picture it drew)."""
    html = re.sub(r"<figcaption>.*?</figcaption>", "", article(path), flags=re.S)
    kind = {"<h": "T", "<p": "T", '<div class="highlight-Python': "C"}
    return "".join(next((v for k, v in kind.items() if m.group(0).startswith(k)), "O") for m in BLOCK.finditer(html))


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


# ---------------------------------------------------------------------------------------------------------------
# Headless Chromium: Debian's, started here, nothing downloaded.

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)
WINDOW = "1280,1000"
"""A laptop's window: Furo shows the sidebar and the page's column at their full widths."""


def chromium(*args: str) -> str:
    """Run headless Chromium with ``args``; return its standard output. Skips the test when it is not installed."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the browser checks are skipped")
    with tempfile.TemporaryDirectory(prefix="nbcoll-chromium-") as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}"]
            + [f"--window-size={WINDOW}", "--virtual-time-budget=10000", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def rendered_text(page: Path, query: str = "") -> str:
    """The text of ``page`` once Chromium has loaded it and run its scripts (the search runs in JavaScript)."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", chromium("--dump-dom", page.as_uri() + query), flags=re.S)
    return visible(dom)


def screenshot(page: Path, png: Path, height: int = 1600) -> Path:
    """Save what Chromium shows of ``page`` in a window 1280 pixels wide and ``height`` tall."""
    png.parent.mkdir(parents=True, exist_ok=True)
    chromium(f"--window-size=1280,{height}", f"--screenshot={png}", page.as_uri())
    assert png.stat().st_size > 0, png
    return png


MEASURE = """<script>
window.addEventListener("load", () => {
  const box = (el) => ({scroll: el.scrollWidth, client: el.clientWidth});
  const found = {
    text: document.querySelector("article").innerText,
    images: [...document.querySelectorAll("article img")].map((img) => ({
      src: img.getAttribute("src"), alt: img.alt, natural: img.naturalWidth,
      shown: img.getBoundingClientRect().width, loaded: img.complete && img.naturalWidth > 0})),
    pres: [...document.querySelectorAll("article pre")].map((pre) => ({
      text: pre.textContent.slice(0, 200), pre: box(pre), parent: box(pre.parentElement)})),
  };
  const out = document.createElement("pre");
  out.id = "nbcoll-measured";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});
</script>"""


def measured(page: Path) -> dict:
    """The text, the images (natural and shown widths) and ``<pre>`` blocks (scroll and visible widths) of
    ``page``'s article, as Chromium lays it out: a copy of the page, beside it, gets a script that measures them."""
    copy = page.with_name(page.stem + ".measured.html")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    try:
        dom = chromium("--dump-dom", copy.as_uri())
    finally:
        copy.unlink()
    found = re.search(r'<pre id="nbcoll-measured">(.*?)</pre>', dom, flags=re.S)
    assert found, dom[-2000:]
    return json.loads(html_module.unescape(found.group(1)))
