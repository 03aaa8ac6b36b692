"""Real Quarto and the fallback render the same report alike: cross-references, captions, figures' alt text,
numbered section headings, inline values and the footer agree. Runs where a `quarto` binary is on PATH (skipped
otherwise; `../shared/tools/build-quarto.sh` builds Quarto 1.7.34 from source)."""

from __future__ import annotations

import html
import re
import shutil

import pytest

from remat.report import render
from test_report import make_project

pytestmark = pytest.mark.skipif(shutil.which("quarto") is None, reason="no quarto binary on PATH")


@pytest.mark.slow
def test_quarto_and_fallback_render_the_report_alike(tmp_path):
    """Each engine's page, as text a reader meets, against the same hand-written expectations."""
    root = make_project(tmp_path)
    demo = root / "reports" / "demo.qmd"   # no text/html output: Quarto would fetch require.js from a CDN for it
    demo.write_text(demo.read_text().replace("\ndf\n", "\nMarkdown(df.to_markdown(index=False))\n"))
    for engine, renderer in (("quarto", r"Quarto \d+\.\d+"), ("fallback", r"remat.s fallback renderer \(pandoc \d")):
        [out] = render(["demo"], engine=engine, root=root)
        page = out.read_text(encoding="utf-8")
        text = re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S))
        text = " ".join(html.unescape(text).split())
        # the cross references, then the captions (with their first words)
        assert re.findall(r"(?:Figure|Table|Section) \d+(?:: \w+ \w+)?", text) == [
            "Figure 1", "Table 1", "Figure 2", "Table 2", "Section 2",
            "Figure 1: A line", "Table 1: The data", "Figure 2: A static", "Table 2: Markdown table"], engine
        assert re.findall(r"\d+ (?:Setup|Results)", text) == ["1 Setup", "2 Results"] * 2, engine   # toc, headings
        alts = sorted(html.unescape(alt) for alt in re.findall(r'<img [^>]*alt="([^"]+)"', page))
        assert alts == ["A short line from the figure rule.", 'A straight "rising" line.'], engine
        assert "Str: a_b*c* <x> | `q` [l](u) #h !e." in text, engine   # a str inline value: markdown escaped
        assert re.search(f"Rendered by {renderer}", text), engine
