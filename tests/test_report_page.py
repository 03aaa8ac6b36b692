"""The fallback renderer's page (page.html + page.css + crossref.lua + footer.lua): laid out like a Quarto page
(title block, table of contents column), the renderer footer, and str inline values escaped as Quarto escapes
them. On test_report's render of its DEMO."""

from __future__ import annotations

import html as entities
import re

import pypandoc

from remat.report.fallback import cell_markdown, quarto_escaped
from remat.report.qmd import Cell
from test_report import html, project  # noqa: F401  (the module's fixtures: one render of DEMO)


def test_page_layout_and_footer_like_quarto(html):
    assert re.search(r'<div id="page" class="page has-toc">\s*<nav id="TOC" role="doc-toc">', html)
    assert '<h2 id="toc-title">Table of contents</h2>' in html
    assert '<a href="#sec-results" id="toc-sec-results">' in html
    title = re.search(r'<header id="title-block-header" class="title-block">(.*?)</header>', html, re.S).group(1)
    assert '<h1 class="title">Demo report</h1>' in title and '<p class="subtitle">A subtitle</p>' in title
    assert "Authors</div>" in title and "<p>Ada</p>" in title and "<p>Grace</p>" in title
    assert '<p class="date">March 5, 2024</p>' in title            # Quarto's default date-format: long
    css = "".join(re.findall(r'<style type="text/css">(.*?)</style>', html, re.S))
    assert "position: sticky" in css and "system-ui" in css and ".table-wrap { overflow-x: auto" in css
    assert "@media (max-width: 991.98px)" in css
    footer = re.search(r'<footer class="remat-footer"[^>]*>(.*?)</footer>', html, re.S).group(1)
    footer = " ".join(entities.unescape(footer).split())
    version = pypandoc.get_pandoc_version()
    assert f"Rendered by remat's fallback renderer (pandoc {version}) on 1970-01-02." in footer
    assert html.index("</footer>") > html.index("asis bold")   # last on the page


def test_str_inline_values_are_escaped_like_quarto(html):
    text = " ".join(re.search(r"Str: (.*?)</p>", html, re.S).group(1).split())
    assert text.startswith("a_b*c* &lt;x&gt; | `q` [l](u) #h !e. ")
    assert "Markdown: <strong>bold</strong> value." in text    # text/markdown stays markdown
    assert 'HTML: <span class="rawhtml">raw</span>.' in text     # text/html raw, as Quarto
    assert "List: [‘a_b’]." in text
    assert quarto_escaped("'a_b*c*'") == r"a\_b\*c\*"
    assert quarto_escaped('"it\'s `x` <y> | $z$"') == r"it's \`x\` <y\> | $z$"
    assert quarto_escaped("'1.5 (a) [b] {c} #d +e -f !g, h'") == r"1\.5 \(a\) \[b\] \{c\} \#d \+e \-f \!g\, h"
    assert quarto_escaped(r"'a\\b'") == "a" + "\\" * 8 + "b"
    assert quarto_escaped("3") == "3" and quarto_escaped("[1, 'a_b']") == "[1, 'a_b']"


def test_cell_figure_alt_in_markdown():
    cell = Cell(line=3, header="python", code="plot()",
                options={"label": "fig-x", "fig-cap": "Cap.", "fig-alt": 'Alt "q" \\ end.'})
    output = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}}
    md = cell_markdown(cell, [output], dict(echo=False, warning=True, output=True, include=True, **cell.options), "")
    assert '![](data:image/png;base64,iVBORw0KGgo=){fig-alt="Alt \\"q\\" \\\\ end."}' in md


# --- every rendered page reads cleanly: no cross-reference debris, no NaN / None shown as a value, no
# status word in a number's slot, no empty list -----------------------------------------------------------------

import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from html.parser import HTMLParser  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from remat.errors import UsageError  # noqa: E402
from remat.report import render, report_sources  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(p.stem for p in (ROOT / "reports").glob("*.qmd"))
_SKIP = {"script", "style", "math", "code", "pre", "nav", "head"}   # not prose: sources, the TOC, the title's meta
_STATUS = r"(?:invalid|not measured|not reproducible)"
_SLOT = re.compile(rf"(?:\b(?:by|at|on|in|of|to|median|worst|largest|slowdown|most|error is)|=|\()\s+{_STATUS}\b"
                   rf"|\(worst {_STATUS}")
_NONE = re.compile(r"(?:[=:(]\s*|\b(?:is|at|by|of|are)\s)(?:None|NaN)\b|\b(?:None|NaN)\s*[);%]|\bnan\b")


class _Text(HTMLParser):
    """A page's prose (outside _SKIP and tables) and its table cells, as text."""

    def __init__(self):
        super().__init__()
        self.prose, self.cells, self._skip, self._cell = [], [], 0, None

    def handle_starttag(self, tag, attrs):
        self._skip += tag in _SKIP
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        self._skip -= tag in _SKIP and self._skip > 0
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._skip:
            return
        (self._cell if self._cell is not None else self.prose).append(data)


def page_problems(page: str) -> list[str]:
    """What makes a rendered page read badly: cross-reference debris, an empty list, NaN / None shown as a value, a
    status word where a number belongs (text around each hit)."""
    text = _Text()
    text.feed(page)
    prose = " ".join("".join(text.prose).split())
    around = lambda m: f"…{prose[max(0, m.start() - 60):m.end() + 40]}…"
    problems = [f"cross-reference debris {m.group(0)!r}: {around(m)}"
                for m in re.finditer(r"@(?:tbl|fig|sec)-[\w-]*|\bis in \d+\.", prose)]
    problems += [f"an empty list: {m.group(0)[:80]!r}" for m in
                 re.finditer(r"<(ol|ul)\b[^>]*>\s*(?:<li>\s*</li>\s*)*</\1>", page)]
    problems += [f"{m.group(0)!r} shown as a value: {around(m)}" for m in _NONE.finditer(prose)]
    problems += [f"a table cell shows {c!r}" for c in text.cells if re.fullmatch(r"nan|NaN|None|<NA>|NaT", c)
                 or re.search(r"\b(?:nan|NaN)\b", c)]
    return problems + [f"a status in a number's slot: {around(m)}" for m in _SLOT.finditer(prose)]


def test_page_problems_finds_the_debris_of_issue_47():
    debris = ('<ul><li>listed in <ol class="example" type="1"><li></li></ol></li></ul><p>per size, is in 1. On a '
              'CPU; see @tbl-x. The slowdown off by a median invalid: timed while busy (worst invalid: busy). '
              'Measured on not measured yet (snakemake x), at not measured yet budgets; k = nan, a = None, b = NaN.</p>'
              '<table><tr><td>NaN</td><td>None</td></tr></table>')
    found = " ".join(page_problems(debris))
    for what in ("empty list", "is in 1.", "'@tbl-x'", "median invalid", "(worst invalid", "on not measured",
                 "at not measured", "'nan' shown", "'= None' shown", "cell shows 'NaN'", "cell shows 'None'"):
        assert what in found, what
    clean = ("<p>Of the 26 claims, 3 are not reproducible here and 1 is invalid. None of the 12 plans fits. A timing "
             "that fails is marked invalid there; the slowdown is 3.3 % (invalid: busy). A block filled with NaN, "
             "then read.</p>"
             "<table><tr><td>invalid: busy</td><td>—</td></tr></table><ul><li>a</li></ul>")
    assert page_problems(clean) == []


@pytest.mark.parametrize("name", NAMES)
def test_rendered_page_reads_cleanly(name):
    page = ROOT / "reports" / f"{name}.html"
    if not page.exists():
        pytest.skip(f"reports/{name}.html is not rendered")
    assert page_problems(page.read_text(encoding="utf-8")) == []


def _project(tmp: Path) -> Path:
    """A copy of the Quarto project in ``tmp`` reading this checkout's results and figures (linked, mtimes kept)."""
    if not (ROOT / "results" / "findings").is_dir():
        pytest.skip("no results yet (make all)")
    shutil.copy(ROOT / "_quarto.yml", tmp)
    shutil.copytree(ROOT / "reports", tmp / "reports", ignore=shutil.ignore_patterns("*.html", "*_files"))
    (tmp / "src" / "remat" / "report").mkdir(parents=True)
    shutil.copy(ROOT / "src" / "remat" / "report" / "footer.lua", tmp / "src" / "remat" / "report")
    for folder in ("results", "results-reference", "figures"):
        if (ROOT / folder).exists():
            (tmp / folder).symlink_to(ROOT / folder)
    return tmp


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["fallback", "quarto"])
def test_every_page_reads_cleanly_in_both_engines(engine, tmp_path, monkeypatch):
    """Every report rendered from this checkout's results by ``engine`` (Quarto where it is on PATH), then read."""
    if engine == "quarto" and shutil.which("quarto") is None:
        pytest.skip("quarto is not on PATH")
    monkeypatch.setenv("QUARTO_PYTHON", os.environ.get("QUARTO_PYTHON", sys.executable))
    root, problems = _project(tmp_path), {}
    for qmd in report_sources(root):
        try:
            (page,) = render([qmd.stem], engine=engine, root=root)
        except UsageError as exc:   # findings older than their tables: not renderable until remade
            assert "older than" in str(exc), exc
            continue
        problems[qmd.stem] = page_problems(page.read_text(encoding="utf-8"))
    assert problems and {k: v for k, v in problems.items() if v} == {}
