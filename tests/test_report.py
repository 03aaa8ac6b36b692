"""remat.report: the fallback renderer (nbclient + pandoc + crossref.lua) on a tiny project, engine choice,
the CLI's errors, and the index / provenance helpers.

One module-scoped render of DEMO (also the page tests' and the Quarto parity test's report) is shared by the
assertions on its HTML (one kernel start).
"""

from __future__ import annotations

import base64
import re
import shutil
import stat
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from remat.cli import main
from remat.errors import UsageError
from remat.report import index_markdown, provenance_markdown, quarto_binary, render, report_sources

ROOT = Path(__file__).resolve().parents[1]
NBSP = "\u00a0"
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg"
                       "==")   # a 1x1 image: the static figure

DEMO = textwrap.dedent('''\
    ---
    title: "Demo report"
    subtitle: "A subtitle"
    author: [Ada, Grace]
    date: 2024-03-05
    execute:
      echo: true
      warning: true
    ---

    ## Setup {#sec-setup}

    ```{python}
    import pandas as pd
    from IPython.display import HTML, Markdown
    df = pd.read_csv("results/t.csv")          # cwd is the project root
    answer = int(df["a"].sum()) * 1000 + 7     # 4007
    name = "Chen"
    x = 1
    s = "a_b*c* <x> | `q` [l](u) #h !e"
    md, raw = Markdown("**bold** value"), HTML("<span class='rawhtml'>raw</span>")
    ```

    Inline: the answer is `{python} f"{answer:,}"`, the name is `{python} name`, before: `{python} x`.
    Str: `{python} s`. Markdown: `{python} md`. HTML: `{python} raw`. List: `{python} ["a_b"]`.

    See @fig-plot, @tbl-data, @fig-static, @tbl-md and @sec-results; also [-@sec-setup].
    Math: $s b h (34 + 5 a s / h)$.

    ## Results {#sec-results}

    ```{python}
    import warnings
    x = 2
    warnings.warn("SHOWN_WARNING")
    ```

    After: `{python} x`.

    ```{python}
    #| label: fig-plot
    #| fig-cap: "A line, $y = x$."
    #| fig-alt: 'A straight "rising" line.'
    import matplotlib.pyplot as plt
    plt.figure(figsize=(2, 1.5))
    plt.plot([0, 1], [0, 1])
    plt.show()
    ```

    ```{python}
    #| label: tbl-data
    #| tbl-cap: "The data table."
    df
    ```

    ![A static figure from a rule.](/figures/line.png){#fig-static fig-alt="A short line from the figure rule."}

    | x   | y   |
    |-----|-----|
    | gpt3-175b | two words |

    : Markdown table {#tbl-md}

    ::: {.callout-note}
    Later value: `{python} answer + 1`.
    :::

    ```{python}
    #| echo: false
    #| warning: false
    secret_source_token = 1
    print("VISIBLE_OUTPUT")
    warnings.warn("HIDDEN_WARNING")
    ```

    ```{python}
    #| include: false
    print("INCLUDE_FALSE_OUTPUT")
    ```

    ```{python}
    #| output: asis
    print("**asis bold**")
    ```
    ''')


def make_project(root: Path) -> Path:
    """A tiny Quarto project: the repo's _quarto.yml and the filters it names, one image, one results table."""
    for folder in ("reports", "figures", "results"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for rel in ["_quarto.yml", *yaml.safe_load((ROOT / "_quarto.yml").read_text()).get("filters", [])]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    (root / "figures" / "line.png").write_bytes(PNG)
    (root / "results" / "t.csv").write_text("a,b\n1,2\n3,4\n")
    (root / "reports" / "demo.qmd").write_text(DEMO)
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def html(project) -> str:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SOURCE_DATE_EPOCH", "86400")            # footer.lua dates the page 1970-01-02
        assert render(["demo"], engine="fallback", root=project) == [project / "reports" / "demo.html"]
    return (project / "reports" / "demo.html").read_text(encoding="utf-8")


def test_inline_values_are_evaluated_in_kernel_order(html):
    assert "the answer is 4,007," in html
    assert "the name is Chen," in html            # a str shows without its quotes, as in Quarto
    assert "before: 1." in html and "After: 2." in html
    assert "Later value: 4008." in html
    assert "{python}" not in html


def test_figures_are_embedded_numbered_with_alt_text_and_the_page_offline(html):
    plot = re.search(r'<figure id="fig-plot">(.*?)</figure>', html, re.S).group(1)
    assert 'src="data:image/png;base64,' in plot
    assert f"Figure{NBSP}1: A line," in plot and "<math" in plot
    assert re.search(r'<img [^>]*alt="A straight &quot;rising&quot; line\."', plot)   # alt text from fig-alt
    static = re.search(r'<figure id="fig-static">(.*?)</figure>', html, re.S).group(1)
    assert 'src="data:image/png;base64,' in static
    assert f"Figure{NBSP}2: A static figure from a rule." in static
    assert re.search(r'<img [^>]*alt="A short line from the figure rule\."', static)
    assert "fig-alt" not in html
    assert not re.search(r'(src|href)="(?!data:|#)', html) and "<link" not in html   # no CDN, nothing to fetch
    assert "mathjax" not in html.lower()


def test_cross_references_are_links(html):
    assert f'<a href="#fig-plot" class="quarto-xref">Figure{NBSP}1</a>' in html
    assert f'<a href="#fig-static" class="quarto-xref">Figure{NBSP}2</a>' in html
    assert f'<a href="#tbl-data" class="quarto-xref">Table{NBSP}1</a>' in html
    assert f'<a href="#tbl-md" class="quarto-xref">Table{NBSP}2</a>' in html
    assert f'<a href="#sec-results" class="quarto-xref">Section{NBSP}2</a>' in html
    assert '<a href="#sec-setup" class="quarto-xref">1</a>' in html       # [-@sec-setup]: number only
    assert re.search(r'<h2 data-number="2" id="sec-results">', html)      # the number the ref names


def test_table_captions_and_scrolling(html):
    table = re.search(r'<div id="tbl-data" class="table-float">(.*?)</table>', html, re.S).group(1)
    assert table.index(f"Table{NBSP}1: The data table.") < table.index("<table")   # caption above
    assert re.search(r"<th>a</th>\s*<th>b</th>", table)
    assert table.index('<div class="table-wrap">') < table.index('<table border="1" class="dataframe">')
    assert f"<caption>Table{NBSP}2: Markdown table</caption>" in html
    assert re.search(r'<div class="table-wrap">\s*<table id="tbl-md">', html)     # wide tables scroll
    assert '<td class="nowrap">gpt3-175b</td>' in html and "<td>two words</td>" in html


def test_cell_options(html):
    assert re.search(r'<pre class="sourceCode python cell-code">.*?read_csv', html, re.S)   # echo: true
    assert "secret_source_token" not in html and "VISIBLE_OUTPUT" in html   # echo: false
    assert "INCLUDE_FALSE_OUTPUT" not in html            # include: false
    assert "UserWarning: HIDDEN_WARNING" not in html and "UserWarning: SHOWN_WARNING" in html
    assert "<strong>asis bold</strong>" in html          # output: asis
    assert 'class="callout callout-note"' in html and ">\nNote\n<" in html


@pytest.mark.parametrize("body, code, error", [
    ("```{python}\n#| label: boom\nx = 1\n```\n\n```{python}\n1 / 0\n```\n", 1,
     r"(?s)remat report: failed: reports/bad.qmd: the cell at line 10 raised.*ZeroDivisionError"),
    ("Value: `{python} undefined_name`.\n", 1, r"line 5: `\{python\} undefined_name` raised NameError"),
    # Quarto prints an empty inline value as its source text; the fallback refuses it instead of hiding it
    ("```{python}\nnote = ''\n```\n\nValue: `{python} note`.\n", 1, r"`\{python\} note`: the value is empty"),
    # both engines show a str's repr escapes (a backslash, or \\' when it holds both quotes) as backslashes
    ("```{python}\nv = 'one\\\\two'\n```\n\nValue: `{python} v`.\n", 1, "repr has a backslash"),
    ("```{python}\nv = 'it\\'s \"so\"'\n```\n\nValue: `{python} v`.\n", 1, "repr has a backslash"),
    ("![gone](../figures/missing.png)\n", 1, "Could not fetch resource ../figures/missing.png"),
    ("::: {.panel-tabset}\nx\n:::\n", 2, "reports/bad.qmd: outside the Quarto subset"),
    (None, 2, "NAME: no reports/nope.qmd"),
    # rendered before the pipeline made its tables: one line naming the table and the command
    ("```{python}\nimport pandas as pd\npd.read_csv('results/x/y.csv')\n```\n", 2,
     r"results/x/y.csv does not exist yet: run `snakemake reports/bad.html --cores all`"),
])
@pytest.mark.slow
def test_a_failing_render_says_why_and_writes_nothing(project, monkeypatch, capsys, body, code, error):
    """Exit 1 (RenderError) for a failed render, 2 (UsageError: one line) for a report to fix or make first."""
    if body:
        (project / "reports" / "bad.qmd").write_text("---\ntitle: bad\n---\n\n" + body)
    monkeypatch.chdir(project)
    assert main(["report", "--engine", "fallback", "bad" if body else "nope"]) == code
    err = capsys.readouterr().err
    assert re.search(error, err) and (code == 1 or len(err.strip().splitlines()) == 1), err
    assert not list((project / "reports").glob("*bad.html*"))   # no page, no temp file left behind


def test_engine_choice_and_quarto_render_in_the_project_root(tmp_path, monkeypatch):
    """A stand-in `quarto` records how it was called and writes the HTML where Quarto would."""
    root = make_project(tmp_path / "proj")
    (root / "reports" / "r.qmd").write_text("---\ntitle: r\n---\n\nText.\n")
    monkeypatch.setenv("PATH", str(tmp_path))        # no quarto on PATH
    assert quarto_binary("auto") is None and quarto_binary("fallback") is None
    for engine in ("quarto", "pandoc"):
        with pytest.raises(UsageError, match="--engine"):
            quarto_binary(engine)
    fake = tmp_path / "quarto"
    fake.write_text('#!/bin/sh\necho "$PWD $@" > call.txt\nbase=${2%.qmd}\necho "<html>" > "$base.html"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert quarto_binary("auto") == str(fake) and quarto_binary("fallback") is None
    assert render(["r"], engine="auto", root=root) == [root / "reports" / "r.html"]
    assert (root / "call.txt").read_text().split() == [str(root), "render", "reports/r.qmd"]


def test_report_sources_and_the_index(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    for name, title in (("index", "Index"), ("planner", "The planner"), ("chen2016", "Chen et al. 2016"),
                        ("extra", "Extra")):
        (reports / f"{name}.qmd").write_text(f"---\ntitle: {title}\n---\n")
    (reports / "chen2016.html").write_text("<html></html>")
    assert [p.stem for p in report_sources(tmp_path)] == ["chen2016", "extra", "planner", "index"]   # index last
    assert [p.stem for p in report_sources(tmp_path, ["reports/extra.qmd", "chen2016.qmd"])] == ["extra", "chen2016"]
    with pytest.raises(UsageError, match="NAME: no reports/nope.qmd"):
        report_sources(tmp_path, ["nope"])
    assert index_markdown(tmp_path).splitlines() == [   # catalog.REPORTS order first, then the rest
        "- [Chen et al. 2016](chen2016.html)",
        "- The planner — not rendered yet (`snakemake reports/planner.html --cores all`)",
        "- Extra — not rendered yet (`snakemake reports/extra.html --cores all`)",
    ]


def test_provenance_markdown_summarises_result_rows():
    rows = pd.DataFrame({"device_name": ["NVIDIA H100", "NVIDIA H100", "AMD EPYC"],
                         "git_commit": ["abc123", "abc123", "abc123"],
                         "timestamp": ["2025-01-02T00:00:00+00:00", "2025-01-01T00:00:00+00:00",
                                       "2025-01-03T00:00:00+00:00"]})
    text = provenance_markdown(rows)
    assert text.splitlines()[0] == "**Provenance**"
    assert "- results, device: `AMD EPYC`, `NVIDIA H100`" in text
    assert "- results, git commit: `abc123`" in text
    assert "- results measured: 2025-01-01T00:00:00+00:00 to 2025-01-03T00:00:00+00:00" in text
    assert re.search(r"- rendered: \d{4}-\d\d-\d\dT.* git commit `\w+", text)
    assert re.search(r"- versions: Python 3\.\d+\.\d+, torch \S+, numpy \S+, pandas \S+", text)
    assert "come from" not in text                           # one clean commit: no warning
    for commits, warning in ((["abc123", "def456"], "from 2 commits"), (["abc123+dirty"], "uncommitted changes")):
        assert warning in provenance_markdown(pd.DataFrame({"git_commit": commits}))
