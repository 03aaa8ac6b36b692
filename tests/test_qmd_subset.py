"""Every reports/*.qmd stays inside the Quarto subset both engines render alike (remat.report.lint_qmd),
and the linter rejects each construct outside it while accepting the look-alikes that are inside."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from remat.report import lint_qmd

ROOT = Path(__file__).resolve().parents[1]
REPORTS = sorted((ROOT / "reports").glob("*.qmd"))

FRONT = "---\ntitle: T\n---\n\n"

# Inside the subset, including things that look like forbidden constructs.
VALID = FRONT + textwrap.dedent('''\
    ## Setup {#sec-setup}

    ```{python}
    #| label: fig-a
    #| fig-cap: "A figure, $x^2$."
    #| fig-alt: A rising line.
    #| echo: false
    #| warning: false
    import matplotlib.pyplot as plt
    plt.plot([1, 2])
    ```

    ```{python}
    #| label: tbl-a
    #| tbl-cap: A table.
    #| output: asis
    #| include: true
    print("| a |\\n|---|\\n| 1 |")
    ```

    ```{python}
    #| label: plain-label
    #| output: false
    x = 1  # '#|' here is just a comment
    ```

    Value `{python} x`; see @fig-a, @tbl-a, @fig-b, @tbl-b, @sec-setup and [-@sec-two].
    Inline code `@torch.compile` and `{{< not-a-shortcode >}}` is literal; mail a@b.com.
    Math $a_{i}$ and $$\\begin{aligned} x &= 1 \\end{aligned}$$ and prices like [$5 and $6]{.paper}.

    ```python
    # a static listing is not run: matplotlib.use("Agg"), {{< x >}}, @decorator, ::: {.panel-tabset}
    ```

    ![Static figure.](../figures/x.png){#fig-b width=80% fig-alt="A static figure, alt text with = and spaces"}

    ![Unlabelled, from the project root.](/figures/y.svg)

    | a | b |
    |---|---|
    | x | y |

    : Caption {#tbl-b}

    ## Two {#sec-two .unnumbered}

    ::: {.callout-tip title="Hint"}
    Text.
    :::

    ::: callout-warning
    Careful.
    :::

    ```{=html}
    <div>raw html is fine</div>
    ```
    ''')


def test_valid_document_has_no_problems():
    assert lint_qmd(VALID) == []


@pytest.mark.parametrize("path", REPORTS, ids=[p.name for p in REPORTS])
def test_report_is_inside_the_subset(path):
    assert lint_qmd(path.read_text(encoding="utf-8")) == []


def test_there_are_reports():
    assert (ROOT / "reports" / "index.qmd") in REPORTS


def cell(*lines: str) -> str:
    return "```{python}\n" + "\n".join(lines) + "\n```\n"


# (name, body after the front matter (FRONT_MATTER: a whole document), a fragment the problem must contain)
FORBIDDEN = [
    ("r-cell", "```{r}\nx <- 1\n```\n", "```{r} cell"),
    ("ojs-cell", "```{ojs}\nx = 1\n```\n", "```{ojs} cell"),
    ("options-in-braces", "```{python echo=false}\nx = 1\n```\n", "'#|' lines"),
    ("unknown-option", cell("#| eval: false", "x = 1"), "option 'eval'"),
    ("fig-cap-without-fig-label", cell("#| label: plot", "#| fig-cap: A", "x = 1"), "label: fig-"),
    ("fig-label-without-cap", cell("#| label: fig-a", "x = 1"), "fig-cap"),
    ("tbl-cap-with-fig-label", cell("#| label: fig-a", "#| tbl-cap: A", "x = 1"), "label: tbl-"),
    ("echo-fenced", cell("#| echo: fenced", "x = 1"), "echo must be true or false"),
    ("output-bogus", cell("#| output: bogus", "x = 1"), "output must be"),
    ("bad-option-yaml", cell("#| label: [", "x = 1"), "not valid YAML"),
    ("option-after-code", cell("x = 1", "#| echo: false"), "after code"),
    ("unclosed-cell", "```{python}\nx = 1\n", "never closed"),
    ("matplotlib-use", cell("import matplotlib", "matplotlib.use('Agg')"), "matplotlib.use("),
    ("shortcode", "Text {{< pagebreak >}} here.\n", "shortcodes"),
    ("shortcode-percent", "{{% include x.md %}}\n", "shortcodes"),
    ("raw-latex-block", "```{=latex}\n\\newpage\n```\n", "raw {=latex}"),
    ("raw-latex-inline", "Text `\\newpage`{=latex}.\n", "raw inline {=latex}"),
    ("tex-environment", "\\begin{center}\nx\n\\end{center}\n", "raw LaTeX"),
    ("panel-tabset", "::: {.panel-tabset}\n## A\n:::\n", "fenced div"),
    ("layout-div", "::: {layout-ncol=2}\nx\n:::\n", "fenced div"),
    ("callout-important", "::: {.callout-important}\nx\n:::\n", "fenced div"),
    ("callout-with-id", "::: {#note .callout-note}\nx\n:::\n", "fenced div"),
    ("undefined-ref", "See @fig-missing.\n", "@fig-missing refers to an undefined label"),
    ("equation-ref", "$$x$$ {#eq-x}\n\nSee @eq-x.\n", "@eq-x: only @fig-"),
    ("equation-label", "$$x$$ {#eq-x}\n", "label #eq-x"),
    ("citation", "As shown [@chen2016].\n", "@chen2016: only @fig-"),
    ("image-attr", "![c](../figures/x.png){#fig-x fig-align=\"center\"}\n", "image attribute"),
    ("remote-image", "![c](https://example.com/x.png)\n", "remote image"),
    ("root-relative-image", "![c](figures/x.png)\n", "relative to reports/"),
    ("heading-id-not-sec", "## Intro {#intro}\n", "attribute '#intro'"),
    ("heading-class", "## Intro {.tabset}\n", "attribute '.tabset'"),
    ("table-caption-class", "| a |\n|---|\n| 1 |\n\n: cap {#tbl-x .striped}\n", "attribute '.striped'"),
    ("span", "Some [aside text]{.aside} here.\n", "bracketed span"),
    ("figure-cell-without-alt", cell("#| label: fig-a", "#| fig-cap: A", "x = 1"), "fig-alt"),
    ("figure-image-without-alt", "![c](../figures/x.png){#fig-x}\n", "needs alt text"),
    ("link-attrs", "A [link](https://x.org){target=_blank}.\n", "attributes on a link"),
    ("inline-r", "Value `{r} x`.\n", "inline `{r}"),
    ("duplicate-label", "## A {#sec-a}\n\n## B {#sec-a}\n", "already defined"),
    ("duplicate-cell-label", cell("#| label: fig-a", "#| fig-cap: A", "x") + "\n![b](../x.png){#fig-a}\n",
     "already defined"),
]
FRONT_MATTER = [
    ("no-front-matter", "# Title\n", "no YAML front matter"),
    ("no-title", "---\nauthor: x\n---\n", "title is required"),
    ("unknown-key", "---\ntitle: T\nbibliography: refs.bib\n---\n", "'bibliography'"),
    ("format-pdf", "---\ntitle: T\nformat: pdf\n---\n", "format must be html"),
    ("format-theme", "---\ntitle: T\nformat:\n  html:\n    theme: cosmo\n---\n", "format.html.theme"),
    ("two-formats", "---\ntitle: T\nformat:\n  html: default\n  pdf: default\n---\n", "format must be html"),
    ("execute-eval", "---\ntitle: T\nexecute:\n  eval: false\n---\n", "execute.eval"),
    ("execute-not-bool", "---\ntitle: T\nexecute:\n  echo: fenced\n---\n", "execute.echo must be"),
    ("jupyter-julia", "---\ntitle: T\njupyter: julia-1.9\n---\n", "jupyter must be python3"),
    ("bad-yaml", "---\ntitle: [\n---\n", "does not parse"),
]


DOCUMENTS = [(name, FRONT + body, expected) for name, body, expected in FORBIDDEN] + FRONT_MATTER


@pytest.mark.parametrize("name,doc,expected", DOCUMENTS, ids=[d[0] for d in DOCUMENTS])
def test_rejects_construct(name, doc, expected):
    problems = lint_qmd(doc)
    assert any(expected in p for p in problems), problems


def test_problems_name_the_line():
    problems = lint_qmd(FRONT + "Text.\n\nSee @fig-none.\n")
    assert problems == ["line 7: @fig-none refers to an undefined label"]


@pytest.mark.parametrize("caption", [
    "```{python}\n#| label: fig-a\n#| fig-cap: \"the GPU's peak at t = 8, the paper's\"\nx = 1\n```\n",
    "![the GPU's peak at t = 8, the paper's](/figures/a.png){#fig-a}\n",
    "| a |\n|---|\n| 1 |\n\n: the GPU's peak at t = 8, the paper's {#tbl-a}\n",
])
def test_rejects_straight_apostrophes_around_equals_in_captions(caption):
    """Quarto 1.7 renders "the GPU's … t = 8, the paper's" in a caption as "t=8"."""
    assert any("apostrophes" in p for p in lint_qmd(FRONT + caption))
    assert not any("apostrophes" in p for p in lint_qmd(FRONT + caption.replace("'", "\u2019")))


@pytest.mark.parametrize("prose,number", [
    ("Recompute costs 33% more than the model FLOPs.\n", "33"),
    ("The fit is within 10 % in 0 of 2 groups.\n", "10"),
    ("Measured on up to 2240 A100s.\n", "2240"),
    ("Prices like $5 and $6 are not math.\n", "5"),                  # currency dollars stay prose
    ("Prices like $5 and $6 are not math.\n", "6"),
    ("A run keeps every tensor at 4 bytes.\n", "4"),
    ("| a | b |\n|---|---|\n| 1.5 | 2 |\n", "1.5"),
    ("![Band is ±25 %.](../figures/x.png){#fig-x fig-alt=\"x\"}\n", "25"),
    (cell("#| label: tbl-a", "#| tbl-cap: Rows within 10 % of it.", "x = 1"), "10"),
    (cell("#| label: fig-a", "#| fig-cap: A.", "#| fig-alt: Three lines.", "#| fig-alt: Bars of 4 sizes.", "x"), "4"),
])
def test_rejects_numbers_typed_in_prose(prose, number):
    """Every number a reader sees is computed at render time or a labelled paper value (issue 16)."""
    problems = [p for p in lint_qmd(FRONT + prose) if "typed in the prose" in p]
    assert any(f"the number {number} " in p for p in problems), problems


@pytest.mark.parametrize("prose", [
    "Paper Table 4, Figure 7, Eq. 5 and 6, Eqs. 2, 3 and 4, §4.1, Algorithm 3, Appendix A.\n",
    "GPT-3, ResNet-200, Llama 3 8B, the 22B model, fp32, bf16, 2sbh, 1F1B, 16-bit masks, Chen et al. 2016.\n",
    "Measured `{python} value`% with $s = 2048$ and $$24 + 5as/h$$.\n",
    "The paper trains a [1,000-layer]{.paper} ResNet on a [12 GB]{.paper} GPU.\n",
    "![Alt.](../figures/x.png){#fig-x width=80% fig-alt=\"x\"}\n",
    "Sizes in MiB (2^20 bytes), rates in GB/s (10^9 B/s), as the paper prints GB = 10⁹ bytes.\n",
    cell("#| label: tbl-a", "#| tbl-cap: \"Within $10$ percent (MiB = 2^20 bytes).\"", "x = 1"),
])
def test_accepts_references_names_math_and_paper_values(prose):
    assert lint_qmd(FRONT + prose) == []
