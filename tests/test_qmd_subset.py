"""Every reports/*.qmd stays inside the Quarto subset both engines render alike (remat.report.lint_qmd),
and the linter rejects each construct outside it while accepting the look-alikes that are inside."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from remat.report import lint_qmd

REPORTS = sorted((Path(__file__).resolve().parents[1] / "reports").glob("*.qmd"))

FRONT = "---\ntitle: T\n---\n\n"

# Inside the subset, including things that look like forbidden constructs.
VALID = FRONT + textwrap.dedent('''\
    ## Setup {#sec-setup}

    ```{python}
    #| label: fig-a
    #| fig-cap: "A figure, $x^2$, the GPU’s peak at t = top, the paper’s."
    #| fig-alt: A rising line.
    #| echo: false
    #| warning: false
    import matplotlib.pyplot as plt
    plt.plot([1, 2])
    ```

    ```{python}
    #| label: tbl-a
    #| tbl-cap: "Within $10$ percent (MiB = 2^20 bytes)."
    #| output: asis
    #| include: true
    print("| a |\\n|---|\\n| 1 |")
    ```

    ```{python}
    #| label: plain-label
    #| output: false
    x = 1
    ```

    Value `{python} x`% with $s = 2048$ and $$24 + 5as/h$$; see @fig-a, @tbl-a, @fig-b, @tbl-b, @sec-setup and
    [-@sec-two]. Inline code `@torch.compile` and `{{< not-a-shortcode >}}` is literal; mail a@b.com.
    Math $a_{i}$ and $$\\begin{aligned} x &= 1 \\end{aligned}$$ and prices like [$5 and $6]{.paper}.
    Paper Table 4, Figure 7, Eq. 5 and 6, Eqs. 2, 3 and 4, §4.1, Algorithm 3, Appendix A.
    GPT-3, ResNet-200, Llama 3 8B, the 22B model, fp32, bf16, 2sbh, 1F1B, 16-bit masks, Chen et al. 2016.
    The paper trains a [1,000-layer]{.paper} ResNet on a [12 GB]{.paper} GPU.
    Sizes in MiB (2^20 bytes), rates in GB/s (10^9 B/s), as the paper prints GB = 10⁹ bytes.

    ```python
    # a static listing is not run: matplotlib.use("Agg"), {{< x >}}, @decorator, ::: {.panel-tabset}
    ```

    ![Static figure.](../figures/x.png){#fig-b width=80% fig-alt="A static figure, alt text with = and spaces"}

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
    ''')


@pytest.mark.parametrize("doc", [VALID, *(p.read_text(encoding="utf-8") for p in REPORTS)],
                         ids=["look-alikes", *(p.name for p in REPORTS)])
def test_inside_the_subset(doc):
    assert lint_qmd(doc) == []
    assert "index.qmd" in [p.name for p in REPORTS]


def cell(*lines: str) -> str:
    return "```{python}\n" + "\n".join(lines) + "\n```\n"


# (name, the document after FRONT (a whole document when it starts with ---), a fragment of the problem)
OUTSIDE = [
    ("r-cell", "```{r}\nx <- 1\n```\n", "```{r}: only ```{python} cells"),
    ("options-in-braces", "```{python echo=false}\nx = 1\n```\n", "'#|' lines"),
    ("unknown-option", cell("#| eval: false", "x = 1"), "option 'eval'"),
    ("echo-fenced", cell("#| echo: fenced", "x = 1"), "echo must be true or false"),
    ("output-bogus", cell("#| output: bogus", "x = 1"), "output must be"),
    ("bad-option-yaml", cell("#| label: [", "x = 1"), "line 6: '#|' options: not valid YAML"),
    ("fig-cap-without-fig-label", cell("#| label: plot", "#| fig-cap: A", "x = 1"), "label: fig-...' go together"),
    ("fig-label-without-cap", cell("#| label: fig-a", "x = 1"), "'#| fig-cap: ...' and"),
    ("tbl-cap-with-fig-label", cell("#| label: fig-a", "#| tbl-cap: A", "x = 1"), "label: tbl-...' go together"),
    ("fig-cap-list", cell("#| label: fig-a", "#| fig-cap: [A, B]", "#| fig-alt: x", "x"), "must be a string"),
    ("figure-cell-without-alt", cell("#| label: fig-a", "#| fig-cap: A", "x = 1"), "fig-alt"),
    ("figure-image-without-alt", "![c](../figures/x.png){#fig-x}\n", "needs alt text"),
    ("matplotlib-use", cell("import matplotlib", "matplotlib.use('Agg')"), "matplotlib.use("),
    ("shortcode", "Text {{< pagebreak >}} here.\n", "shortcodes"),
    ("shortcode-percent", "{{% include x.md %}}\n", "shortcodes"),
    ("span", "Some [aside text]{.aside} here.\n", "bracketed span"),
    ("panel-tabset", "::: {.panel-tabset}\n## A\n:::\n", "fenced div"),
    ("layout-div", "::: {layout-ncol=2}\nx\n:::\n", "fenced div"),
    ("callout-important", "::: {.callout-important}\nx\n:::\n", "fenced div"),
    ("callout-with-id", "::: {#note .callout-note}\nx\n:::\n", "fenced div"),
    ("undefined-ref", "Text.\n\nSee @fig-none.\n", "line 7: @fig-none refers to an undefined label"),
    ("equation-ref", "$$x$$ {#eq-x}\n\nSee @eq-x.\n", "@eq-x: only @fig-"),
    ("equation-label", "$$x$$ {#eq-x}\n", "label #eq-x"),
    ("heading-id-not-sec", "## Intro {#intro}\n", "label #intro"),
    ("citation", "As shown [@chen2016].\n", "@chen2016: only @fig-"),
    ("duplicate-label", "## A {#sec-a}\n\n## B {#sec-a}\n", "line 7: label sec-a is already defined on line 5"),
    ("duplicate-cell-label", cell("#| label: fig-a", "#| fig-cap: A", "#| fig-alt: x", "x") +
     "\n![b](../x.png){#fig-a fig-alt=\"b\"}\n", "already defined"),
    ("unknown-key", "---\ntitle: T\nbibliography: refs.bib\n---\n", "'bibliography'"),
    ("execute-eval", "---\ntitle: T\nexecute:\n  eval: false\n---\n", "'execute.eval'"),
    ("bad-yaml", "---\ntitle: [\n---\n", "front matter: not valid YAML"),
    ("execute-not-a-mapping", "---\ntitle: T\nexecute: 3\n---\n", "execute must be a mapping"),
    ("inline-r", "Value `{r} x` here.\n", "line 5: `{r}` inline: only `{python}`"),
    ("label-with-space", cell("#| label: my plot", "x = 1"), "label 'my plot': a letter"),
    # a caption with two straight apostrophes around "=": Quarto 1.7 renders "t = 8" there as "t=8"
    ("apostrophes-cell", cell("#| label: tbl-a", "#| tbl-cap: \"the GPU's t = top, the paper's\"", "x"),
     "apostrophes"),
    ("apostrophes-image", "![the GPU's t = top, the paper's](/figures/a.png)\n", "apostrophes"),
    ("apostrophes-table", "| a |\n|---|\n| b |\n\n: the GPU's t = top, the paper's {#tbl-a}\n", "apostrophes"),
    # every number a reader sees is computed at render time or a labelled paper value
    ("percent", "Recompute costs 33% more than the model FLOPs.\n", "the number 33 "),
    ("spaced-percent", "The fit is within 10 % in 0 of 2 groups.\n", "the number 10 "),
    ("count", "Measured on up to 2240 A100s.\n", "the number 2240 "),
    ("currency", "Prices like $5 and $6 are not math.\n", "the number 6 "),   # currency dollars stay prose
    ("unit", "A run keeps every tensor at 4 bytes.\n", "the number 4 "),
    ("table-cell", "| a | b |\n|---|---|\n| 1.5 | 2 |\n", "the number 1.5 "),
    ("image-caption", "![Band is ±25 %.](../figures/x.png){#fig-x fig-alt=\"x\"}\n", "the number 25 "),
    ("tbl-cap", cell("#| label: tbl-a", "#| tbl-cap: Rows within 10 % of it.", "x = 1"), "the number 10 "),
    ("fig-alt", cell("#| label: fig-a", "#| fig-cap: A.", "#| fig-alt: Bars of 4 sizes.", "x"), "the number 4 "),
]


@pytest.mark.parametrize("doc,expected", [(d if d.startswith("---") else FRONT + d, e) for _, d, e in OUTSIDE],
                         ids=[name for name, _, _ in OUTSIDE])
def test_outside_the_subset(doc, expected):
    problems = lint_qmd(doc)
    assert any(expected in p for p in problems), problems
