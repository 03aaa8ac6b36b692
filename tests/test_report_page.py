"""The fallback renderer's page (page.html + page.css + crossref.lua + footer.lua): laid out like a Quarto page
(title block, table of contents column, tables in a scroll container), figure alt text from fig-alt, the
renderer footer, and str inline values escaped as Quarto escapes them. One render of a tiny project."""

from __future__ import annotations

import html
import os
import re
import textwrap

import pypandoc
import pytest

from remat.report import render
from remat.report.fallback import cell_markdown, quarto_escaped
from remat.report.qmd import Cell
from test_report import make_project

PAGE = textwrap.dedent('''\
    ---
    title: "Page test"
    subtitle: "A subtitle"
    author: [Ada, Grace]
    date: 2024-03-05
    ---

    ```{python}
    from IPython.display import HTML, Markdown
    s = "a_b*c* <x> | `q` [l](u) #h !e"
    md = Markdown("**bold** value")
    raw = HTML("<span class='rawhtml'>raw</span>")
    ```

    ## Values {#sec-values}

    Str: `{python} s`. Markdown: `{python} md`. HTML: `{python} raw`.
    List: `{python} ["a_b"]`.

    ```{python}
    #| label: fig-cell
    #| fig-cap: "A cell figure."
    #| fig-alt: 'A line, "quoted", rising.'
    import matplotlib.pyplot as plt
    plt.figure(figsize=(2, 1.5))
    plt.plot([0, 1])
    plt.show()
    ```

    ![A static figure.](/figures/line.png){#fig-static fig-alt="A short static line."}

    ## Tables {#sec-tables}

    | x   | y   |
    |-----|-----|
    | gpt3-175b | two words |

    : A markdown table {#tbl-md}

    ```{python}
    #| label: tbl-frame
    #| tbl-cap: "A data frame."
    import pandas as pd
    pd.DataFrame({"a": [1], "b": [2]})
    ```
    ''')


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    root = make_project(tmp_path_factory.mktemp("page"))
    (root / "reports" / "page.qmd").write_text(PAGE, encoding="utf-8")
    saved = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = "86400"            # footer.lua dates the page 1970-01-02
    try:
        [out] = render(["page"], engine="fallback", root=root)
    finally:
        if saved is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = saved
    return out.read_text(encoding="utf-8")


def test_page_layout_like_quarto(page):
    assert re.search(r'<div id="page" class="page has-toc">\s*<nav id="TOC" role="doc-toc">', page)
    assert '<h2 id="toc-title">Table of contents</h2>' in page
    assert '<a href="#sec-tables" id="toc-sec-tables">' in page
    title = re.search(r'<header id="title-block-header" class="title-block">(.*?)</header>', page, re.S).group(1)
    assert '<h1 class="title">Page test</h1>' in title and '<p class="subtitle">A subtitle</p>' in title
    assert "Authors</div>" in title and "<p>Ada</p>" in title and "<p>Grace</p>" in title
    assert '<p class="date">March 5, 2024</p>' in title            # Quarto's default date-format: long
    css = "".join(re.findall(r'<style type="text/css">(.*?)</style>', page, re.S))
    assert "position: sticky" in css and "system-ui" in css and ".table-wrap { overflow-x: auto" in css
    assert "@media (max-width: 991.98px)" in css


def test_self_contained(page):
    assert not re.search(r'(src|href)="(?!data:|#)', page)     # no CDN, no external font, no file to fetch
    assert "<link" not in page


def test_footer_names_the_fallback_and_pandoc(page):
    footer = re.search(r'<footer class="remat-footer"[^>]*>(.*?)</footer>', page, re.S).group(1)
    footer = " ".join(html.unescape(footer).split())
    version = pypandoc.get_pandoc_version()
    assert f"Rendered by remat's fallback renderer (pandoc {version}) on 1970-01-02." in footer
    assert page.index("</footer>") > page.index('id="tbl-frame"')   # last on the page


def test_tables_scroll_in_a_wrapper(page):
    assert re.search(r'<div class="table-wrap">\s*<table id="tbl-md">', page)
    frame = re.search(r'<div id="tbl-frame" class="table-float">(.*?)</table>', page, re.S).group(1)
    raw = frame.index('<table border="1" class="dataframe">')      # a raw HTML table (pandas) is wrapped too
    assert frame.index('<div class="table-wrap">') < raw
    assert '<td class="nowrap">gpt3-175b</td>' in page and "<td>two words</td>" in page


def test_figure_alt_text_from_fig_alt(page):
    cell = re.search(r'<figure id="fig-cell">(.*?)</figure>', page, re.S).group(1)
    assert re.search(r'<img [^>]*alt="A line, &quot;quoted&quot;, rising\."', cell)
    static = re.search(r'<figure id="fig-static">(.*?)</figure>', page, re.S).group(1)
    assert re.search(r'<img [^>]*alt="A short static line\."', static)
    assert "Figure\u00a02: A static figure." in static
    assert "fig-alt" not in page


def test_str_inline_values_are_escaped_like_quarto(page):
    text = re.search(r"<p>Str: (.*?)</p>", page, re.S).group(1)
    text = " ".join(text.split())
    assert text.startswith("a_b*c* &lt;x&gt; | `q` [l](u) #h !e. ")
    assert "Markdown: <strong>bold</strong> value." in text    # text/markdown stays markdown
    assert 'HTML: <span class="rawhtml">raw</span>.' in text     # text/html raw, as Quarto
    assert "List: [‘a_b’]." in " ".join(re.search(r"List: .*?</p>", page, re.S).group(0).split())


def test_quarto_escaped():
    assert quarto_escaped("'a_b*c*'") == r"a\_b\*c\*"
    assert quarto_escaped('"it\'s `x` <y> | $z$"') == r"it's \`x\` <y\> | $z$"
    assert quarto_escaped("'1.5 (a) [b] {c} #d +e -f !g, h'") == r"1\.5 \(a\) \[b\] \{c\} \#d \+e \-f \!g\, h"
    assert quarto_escaped(r"'a\\b'") == "a" + "\\" * 8 + "b"
    assert quarto_escaped("3") == "3" and quarto_escaped("[1, 'a_b']") == "[1, 'a_b']"


def test_cell_figure_alt_in_markdown():
    cell = Cell(line=3, header="python", code="plot()",
                options={"label": "fig-x", "fig-cap": "Cap.", "fig-alt": 'Alt "q" \\ end.'})
    output = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}}
    opts = {"echo": False, "warning": True, "output": True, "include": True, **cell.options}
    md = cell_markdown(cell, [output], opts)
    assert '![](data:image/png;base64,iVBORw0KGgo=){fig-alt="Alt \\"q\\" \\\\ end."}' in md
