"""The built documentation site shows no raw TeX: every formula is a rendered maths span.

``mkdocs build --strict`` builds the site into a temporary directory (about 20 s); every
page's HTML is then read, and text outside the arithmatex maths spans
(``<span class="arithmatex">``, ``<div class="arithmatex">``, which the bundled KaTeX
renders) and outside code (``<code>``, ``<pre>``) must hold no TeX markup (``\\frac``,
``^{``, ``_{``, ``\\mathbb`` ...) and no half-unicode maths such as ``ℝ^{``. A formula
written without ``$...$`` reaches the reader as raw markup; this test names the page and
the text.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# TeX markup (and unicode letters with TeX super-/subscripts) that only a maths span may hold.
RAW_TEX = re.compile(
    r"\\(?:frac|mathbb|mathrm|mathbf|sum|prod|sigma|alpha|tau|mu|cdot|le|ge|top|quad|in)"
    r"(?![A-Za-z])|\^\{|_\{|[ℝℚℤℕ]\^"
)
# Elements whose text is never maths to render: code, scripts, styles, the search index.
_SKIP = {"code", "pre", "script", "style", "kbd", "samp"}


class _TextOutsideMaths(HTMLParser):
    """Collects the text of a page that is neither in a maths span nor in code."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, opens a skipped region)
        self.skipping = 0
        self.chunks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"br", "img", "hr", "input", "meta", "link", "source", "wbr"}:
            return
        classes = (dict(attrs).get("class") or "").split()
        skip = tag in _SKIP or (tag in {"span", "div"} and "arithmatex" in classes)
        self.stack.append((tag, skip))
        self.skipping += skip

    def handle_endtag(self, tag: str) -> None:
        # Close up to the matching open tag (HTML allows omitted end tags such as </p>).
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for _, skip in self.stack[i:]:
                    self.skipping -= skip
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.chunks.append(data)


def raw_tex(html: str) -> list[str]:
    """The snippets of ``html`` with TeX markup outside maths spans and code, in order.

    >>> raw_tex('<p>The set <span class="arithmatex">\\\\(\\\\mathbb{R}^{d}\\\\)</span>.</p>')
    []
    >>> raw_tex('<p>W in ℝ^{d×d} and <code>x_{i}</code></p>')
    ['W in ℝ^{d×d} and ']
    """
    parser = _TextOutsideMaths()
    parser.feed(html)
    parser.close()
    return [chunk for chunk in parser.chunks if RAW_TEX.search(chunk)]


def site_offenders(site: Path) -> dict[str, list[str]]:
    """Page (relative path) -> its raw-TeX snippets, for every HTML page of a built site."""
    out: dict[str, list[str]] = {}
    for page in sorted(site.rglob("*.html")):
        if "assets" in page.relative_to(site).parts:
            continue
        hits = raw_tex(page.read_text(encoding="utf-8"))
        if hits:
            out[str(page.relative_to(site))] = [h.strip()[:120] for h in hits]
    return out


def test_raw_tex_outside_maths_is_flagged() -> None:
    # The wrong variants: formulas written without $...$, as the proof pages once had them.
    assert raw_tex("<p>α₁ = e^{s₁}/(e^{s₁} + e^{s₂})</p>")
    assert raw_tex("<li><p>with parameters W ∈ ℝ^{d×d}</p></li>")
    assert raw_tex(r"<p>the bound \frac{1}{2} and x_{ij}</p>")
    assert raw_tex(r"<div><p>$\mathbb{R}$ left as text</p></div>")
    # Unicode maths and plain prose are fine; so is anything in maths spans or code.
    assert raw_tex("<p>d² + d queries, W ∈ ℝᵈˣᵈ, e_i and x_iᵀ v</p>") == []
    assert raw_tex('<div class="arithmatex">\\[ \\frac{a}{b} \\]</div><p>ok</p>') == []
    assert raw_tex('<div class="highlight"><pre><span>x^{2}</span></pre></div>') == []
    # Text after a closed maths span is checked again.
    assert raw_tex('<p><span class="arithmatex">\\(x\\)</span> then y^{2}</p>') == [" then y^{2}"]


def _build(docs_root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "-f", str(docs_root / "mkdocs.yml"), "-d", str(site)],
        cwd=docs_root, capture_output=True, text=True, timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(site.parent)},
    )


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    site = tmp_path_factory.mktemp("site") / "site"
    proc = _build(ROOT, site)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return site


def test_the_site_builds_and_shows_no_raw_tex(built_site: Path) -> None:
    pages = list(built_site.rglob("index.html"))
    assert len(pages) > 30, "the site has fewer pages than the nav lists"
    # The proof pages carry their maths in rendered spans.
    proof = (built_site / "proofs" / "thm-4-1" / "index.html").read_text(encoding="utf-8")
    assert proof.count('class="arithmatex"') > 50
    offenders = site_offenders(built_site)
    assert offenders == {}, "\n".join(f"{p}: {h}" for p, hs in offenders.items() for h in hs)


def test_a_page_with_raw_tex_is_flagged(tmp_path: Path) -> None:
    """The wrong variant end to end: a site whose page writes a formula without $...$."""
    pytest.importorskip("mkdocs")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(
        "# Page\n\nThe maths $W \\in \\mathbb{R}^{d \\times d}$ renders.\n\n"
        "The step α₁ = e^{s₁}/(e^{s₁} + e^{s₂}) does not.\n",
        encoding="utf-8",
    )
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nmarkdown_extensions:\n  - pymdownx.arithmatex:\n      generic: true\n",
        encoding="utf-8",
    )
    site = tmp_path / "site"
    proc = _build(tmp_path, site)
    assert proc.returncode == 0, proc.stderr[-4000:]
    offenders = site_offenders(site)
    assert list(offenders) == ["index.html"]
    assert any("e^{s₁}" in hit for hit in offenders["index.html"])


def test_the_proof_lists_number_their_steps_once() -> None:
    """Each proof page's numbered steps form one ordered list (no restart at 1)."""
    markdown = pytest.importorskip("markdown")
    config = ["pymdownx.arithmatex", "pymdownx.superfences", "attr_list", "tables"]
    for path in sorted((ROOT / "proofs").glob("*.md")):
        html = markdown.markdown(path.read_text(encoding="utf-8"), extensions=config,
                                 extension_configs={"pymdownx.arithmatex": {"generic": True}})
        restarts = len(re.findall(r"<ol>", html))
        assert restarts <= 1, f"{path.name}: the numbered steps restart ({restarts} lists)"


def test_a_restarting_list_is_caught() -> None:
    markdown = pytest.importorskip("markdown")
    broken = "1. one\n\n       code between\n\n   more\n\n2. two\n"
    assert markdown.markdown(broken).count("<ol>") == 2
    fixed = "1. one\n\n    $$\n    x\n    $$\n\n    more\n\n2. two\n"
    assert markdown.markdown(fixed, extensions=["pymdownx.arithmatex"]).count("<ol>") == 1

