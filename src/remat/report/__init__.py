"""Render the Quarto reports: `quarto render` when Quarto is on PATH, else a fallback (nbclient + pandoc).

    remat report [--engine auto|quarto|fallback] [NAME ...]     ->  reports/NAME.html (one self-contained file)

The Quarto project is the repository root (``_quarto.yml``): cells run with cwd = the root and read
``results/`` and ``figures/``; ``reports/NAME.qmd`` renders in place to ``reports/NAME.html``.

Both engines accept the same subset of Quarto markdown, which ``lint_qmd`` checks (``render`` refuses a
report outside it, so a report that renders in the fallback renders the same way under Quarto):

- Front matter keys title, subtitle, author, date, jupyter, format, execute (echo / warning / output).
- ```` ```{python} ```` cells with ``#|`` options label, echo, output (true / false / asis), include, warning,
  fig-cap + fig-alt (label ``fig-…``), tbl-cap (label ``tbl-…``); no ``matplotlib.use(`` (it hides figures under
  Quarto's Jupyter engine). Inline values `` `{python} expr` ``; math ``$…$`` / ``$$…$$``.
- Cross references ``@fig-x``, ``@tbl-x``, ``@sec-x`` to labels of the file: cells' labels, ``{#sec-x}`` on a
  heading, ``{#fig-x fig-alt="…"}`` on an image, ``{#tbl-x}`` on a table's caption line; no citations.
- No number typed in the prose, captions or alt text: a number a reader sees is an inline value, inside
  ``$math$``, a labelled paper value ``[12 GB]{.paper}``, a reference or name (Table 4, Eq. 5, §4.1, GPT-3,
  fp32, 2sbh, 2016) or a unit's definition (2^20, 10⁹).
- Fenced divs only ``::: {.callout-note}`` / ``-warning`` / ``-tip`` (optional ``title="…"``); no shortcodes
  (``{{< >}}``), no spans ``[x]{…}`` but ``[a paper value]{.paper}``; no two straight apostrophes around "="
  in a caption (Quarto 1.7 drops the spaces around it).

The fallback (``remat.report.fallback``) mirrors Quarto's Jupyter engine; ``footer.lua`` runs under both engines
(``_quarto.yml`` filters): each page's footer names the renderer that made it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from remat.analysis import catalog
from remat.errors import UsageError
from remat.report.fallback import render_fallback
from remat.report.pages import index_markdown, provenance_markdown
from remat.report.lint import lint_qmd
from remat.report.qmd import CELL_TIMEOUT_S, ENGINES, REPORTS_DIR, RenderError, parse_qmd

__all__ = ["RenderError", "index_markdown", "lint_qmd", "parse_qmd", "project_root", "provenance_markdown",
           "quarto_binary", "render", "render_fallback", "render_quarto", "report_sources"]


# --- render: choosing files and engine ---------------------------------------------------------------------

def project_root(start: Path | None = None) -> Path:
    """The Quarto project root: the nearest folder at or above ``start`` (default: cwd) with _quarto.yml.

    Raises UsageError("reports") when there is none (run `remat report` inside the repository).
    """
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "_quarto.yml").is_file():
            return folder
    raise UsageError("reports", f"no _quarto.yml in {start} or above; run `remat report` in the repository")


def report_sources(root: Path, names: list[str] | None = None) -> list[Path]:
    """The .qmd files to render: ``reports/NAME.qmd`` for each name (``NAME``, ``NAME.qmd`` or
    ``reports/NAME.qmd`` accepted), or every ``reports/*.qmd`` with ``index`` last (it links the others).

    Raises UsageError("NAME") for a name with no .qmd.
    """
    folder = root / REPORTS_DIR
    available = sorted(p.stem for p in folder.glob("*.qmd"))
    wanted = [Path(n).stem if n.endswith(".qmd") else n for n in names] if names else available
    for name in wanted:
        if name not in available:
            raise UsageError("NAME", f"no {REPORTS_DIR}/{name}.qmd (available: {', '.join(available) or 'none'})")
    wanted = list(dict.fromkeys(wanted))
    if not names:
        wanted.sort(key=lambda n: n == "index")   # stable: index last
    return [folder / f"{name}.qmd" for name in wanted]


def render(names: list[str] | None = None, engine: str = "auto", root: str | Path | None = None,
           timeout: int = CELL_TIMEOUT_S) -> list[Path]:
    """Render reports to ``reports/NAME.html`` (self-contained: figures embedded, MathML); return the paths.

    engine: "auto", "quarto" or "fallback" (``quarto_binary``: UsageError("--engine")). root: the project root
    (default: ``project_root()``). timeout: seconds per cell. Nothing is rendered when a selected .qmd is outside
    the subset (UsageError("reports/NAME.qmd") listing ``lint_qmd``'s problems) or its findings are older than
    a table they are judged from (UsageError naming both). Raises UsageError("NAME") for an unknown report,
    RenderError when a cell raises or pandoc/quarto fails (that report's HTML is not written).
    """
    quarto = quarto_binary(engine)
    root = Path(root).resolve() if root else project_root()
    sources = report_sources(root, names)
    for qmd in sources:
        problems = lint_qmd(qmd.read_text(encoding="utf-8"))
        if problems:
            raise UsageError(str(qmd.relative_to(root)), "outside the Quarto subset: " + "; ".join(problems))
        _refuse_stale(qmd.stem, root)
    if quarto is None:
        return [render_fallback(qmd, root, timeout) for qmd in sources]
    return [render_quarto(qmd, root, quarto) for qmd in sources]


def _refuse_stale(report: str, root: Path) -> None:
    """UsageError when the report's findings are older than a table they are judged from: the page would quote
    old verdicts beside new tables."""
    newer = catalog.stale(report, root) if report in catalog.SOURCES else None
    if newer is not None:
        findings = catalog.target(f"findings.{report}")
        raise UsageError(findings, f"older than {newer.relative_to(root).as_posix()}: remake it first "
                                   f"(remat findings {report}, or snakemake -f {findings})")


def quarto_binary(engine: str) -> str | None:
    """The ``quarto`` executable ``engine`` asks for, or None for the fallback: "auto" -> Quarto when on
    PATH; "quarto" -> Quarto (UsageError("--engine") when not on PATH); "fallback" -> None."""
    if engine not in ENGINES:
        raise UsageError("--engine", f"{engine!r} is not one of {', '.join(ENGINES)}")
    quarto = shutil.which("quarto") if engine != "fallback" else None
    if engine == "quarto" and not quarto:
        raise UsageError("--engine", "quarto is not on PATH (use --engine fallback or auto)")
    return quarto


def render_quarto(qmd: Path, root: Path, quarto: str = "quarto") -> Path:
    """`quarto render reports/NAME.qmd` in the project root (settings from _quarto.yml); returns the HTML
    path. Raises RenderError when quarto exits non-zero or writes no HTML."""
    rel = qmd.relative_to(root)
    proc = subprocess.run([quarto, "render", str(rel)], cwd=root)
    out = qmd.with_suffix(".html")
    if proc.returncode != 0 or not out.exists():
        raise RenderError(f"{rel}: quarto render failed (exit {proc.returncode})")
    return out
