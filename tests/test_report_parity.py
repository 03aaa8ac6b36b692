"""Real Quarto and the fallback render the same report alike: cross-references, figures (with their alt text),
captions, inline values and section headings agree. Runs where a `quarto` binary is on PATH (skipped otherwise;
`../shared/tools/build-quarto.sh` builds Quarto 1.7.34 from source)."""

from __future__ import annotations

import html
import re
import shutil
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from remat.report import render

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("quarto") is None, reason="no quarto binary on PATH")

REPORT = textwrap.dedent('''\
    ---
    title: "Parity"
    ---

    ```{python}
    value = "a_b*c* <x> | `q`"
    n = 3
    ```

    ## First {#sec-first}

    See @fig-line, @fig-static, @tbl-t and @sec-second. The value is `{python} value`; n is `{python} n`.
    Math $a^2 + b_i$ here.

    ```{python}
    #| label: fig-line
    #| fig-cap: "A line, $x^2$, from a cell."
    #| fig-alt: "A rising straight line."
    import matplotlib.pyplot as plt
    plt.figure(figsize=(3, 2))
    plt.plot([1, 2])
    plt.show()
    ```

    ![A static image caption.](static.png){#fig-static fig-alt="A static picture of a line."}

    ## Second {#sec-second}

    ```{python}
    #| label: tbl-t
    #| tbl-cap: "A table from a cell."
    #| output: asis
    print("| a | b |\\n|---|---|\\n| x | y |")
    ```

    Back to @sec-first and @tbl-t.
    ''')


class _Page(HTMLParser):
    """What a reader meets: cross-reference link texts, caption texts, image alt texts, h2 texts, body text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.xrefs, self.captions, self.alts, self.headings, self.text = [], [], [], [], []
        self._open: list[tuple[str, list[str]]] = []   # (kind, text parts) being collected

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.alts.append(attrs.get("alt") or "")
        kind = ("xref" if tag == "a" and re.match(r"#(fig|tbl|sec)-", attrs.get("href") or "") else
                "caption" if tag in ("figcaption", "caption") or "caption" in (attrs.get("class") or "").split()
                or "table-caption" in (attrs.get("class") or "") else
                "heading" if tag == "h2" else None)
        if kind:
            self._open.append((kind, []))

    def handle_endtag(self, tag):
        if self._open and tag in {"xref": ("a",), "caption": ("figcaption", "caption", "div"),
                                  "heading": ("h2",)}[self._open[-1][0]]:
            kind, parts = self._open.pop()
            text = " ".join("".join(parts).split())
            {"xref": self.xrefs, "caption": self.captions, "heading": self.headings}[kind].append(text)

    def handle_data(self, data):
        for _, parts in self._open:
            parts.append(data)
        self.text.append(data)


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _project(tmp_path: Path) -> Path:
    """A Quarto project with the repository's _quarto.yml (and the files it names) and the report above."""
    shutil.copy(ROOT / "_quarto.yml", tmp_path / "_quarto.yml")
    settings = yaml.safe_load((ROOT / "_quarto.yml").read_text(encoding="utf-8"))
    html_format = (settings.get("format") or {}).get("html") or {}
    named = [*(settings.get("filters") or []), *(html_format.get("css") or []),
             *([html_format["template"]] if "template" in html_format else [])]
    for rel in named:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "parity.qmd").write_text(REPORT, encoding="utf-8")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.figure(figsize=(3, 2))
    plt.plot([1, 2])
    plt.savefig(reports / "static.png")
    plt.close("all")
    return reports / "parity.html"


@pytest.mark.slow
def test_quarto_and_fallback_render_the_report_alike(tmp_path):
    out = _project(tmp_path)
    pages = {}
    for engine in ("quarto", "fallback"):
        render(["parity"], engine=engine, root=tmp_path)
        pages[engine] = _page(out)
        out.rename(tmp_path / f"{engine}.html")
    quarto, fallback = pages["quarto"], pages["fallback"]
    assert [x for x in fallback.xrefs if x.startswith(("Figure", "Table", "Section"))] == \
        [x for x in quarto.xrefs if x.startswith(("Figure", "Table", "Section"))] == \
        ["Figure 1", "Figure 2", "Table 1", "Section 2", "Section 1", "Table 1"]
    captions = ["Figure 1: A line,", "Figure 2: A static image caption.", "Table 1: A table from a cell."]
    for page in (quarto, fallback):
        found = [c for c in page.captions if c.startswith(("Figure", "Table"))]
        assert [c[:len(want)] for c, want in zip(found, captions)] == captions, found
    assert sorted(a for a in fallback.alts if a) == sorted(a for a in quarto.alts if a) == \
        ["A rising straight line.", "A static picture of a line."]
    assert [h for h in fallback.headings if h[:1].isdigit()] == [h for h in quarto.headings if h[:1].isdigit()] == \
        ["1 First", "2 Second"]
    for page in (quarto, fallback):   # a str inline value shows as its text, markdown characters escaped
        assert "The value is a_b*c* <x> | `q`; n is 3." in " ".join(html.unescape("".join(page.text)).split())
    footers = {name: " ".join("".join(page.text).split()) for name, page in pages.items()}
    assert re.search(r"Rendered by Quarto \d+\.\d+", footers["quarto"])
    assert re.search(r"Rendered by remat.s fallback renderer \(pandoc \d+\.\d+", footers["fallback"])
