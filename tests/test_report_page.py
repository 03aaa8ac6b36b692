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
