"""Real Quarto and the fallback render the same report alike: cross-references, figures (with their alt text),
captions, inline values and section headings agree. Runs where a `quarto` binary is on PATH (skipped otherwise;
`../shared/tools/build-quarto.sh` builds Quarto 1.7.34 from source)."""

from __future__ import annotations

import html
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from remat.report import render
from test_report import make_project

pytestmark = pytest.mark.skipif(shutil.which("quarto") is None, reason="no quarto binary on PATH")


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


@pytest.mark.slow
def test_quarto_and_fallback_render_the_report_alike(tmp_path):
    root, pages = make_project(tmp_path), {}
    demo = root / "reports" / "demo.qmd"   # no text/html output: Quarto would fetch require.js from a CDN for it
    demo.write_text(demo.read_text().replace("\ndf\n", "\nMarkdown(df.to_markdown(index=False))\n"))
    for engine in ("quarto", "fallback"):
        [out] = render(["demo"], engine=engine, root=root)
        pages[engine] = _page(out)
    quarto, fallback = pages["quarto"], pages["fallback"]
    assert [x for x in fallback.xrefs if x.startswith(("Figure", "Table", "Section"))] == \
        [x for x in quarto.xrefs if x.startswith(("Figure", "Table", "Section"))] == \
        ["Figure 1", "Table 1", "Figure 2", "Table 2", "Section 2"]
    captions = ["Figure 1: A line,", "Table 1: The data table.", "Figure 2: A static figure from a rule.",
                "Table 2: Markdown table"]
    for page in (quarto, fallback):
        found = [c for c in page.captions if c.startswith(("Figure", "Table"))]
        assert [c[:len(want)] for c, want in zip(found, captions)] == captions, found
    assert sorted(a for a in fallback.alts if a) == sorted(a for a in quarto.alts if a) == \
        ['A short line from the figure rule.', 'A straight "rising" line.']
    assert [h for h in fallback.headings if h[:1].isdigit()] == [h for h in quarto.headings if h[:1].isdigit()] == \
        ["1 Setup", "2 Results"]
    for page in (quarto, fallback):   # a str inline value shows as its text, markdown characters escaped
        assert "Str: a_b*c* <x> | `q` [l](u) #h !e." in " ".join(html.unescape("".join(page.text)).split())
    footers = {name: " ".join("".join(page.text).split()) for name, page in pages.items()}
    assert re.search(r"Rendered by Quarto \d+\.\d+", footers["quarto"])
    assert re.search(r"Rendered by remat.s fallback renderer \(pandoc \d+\.\d+", footers["fallback"])
