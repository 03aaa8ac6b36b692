"""The replication scorecard of reports/index.qmd: a view over the findings marked as claims
(``results/findings/index.csv``, made by ``remat findings index`` from the reports' findings). Nothing is judged
here: each row shows the claim, the paper's value and its source, ours, where ours comes from, the status with
its reason, the rule that decided it and a link to the report section that shows it.

    print(scorecard_markdown("."))      # Markdown for an ``output: asis`` cell (root: the project root)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from remat.analysis import catalog
from remat.analysis.findings import REPRODUCED, Finding, load
from remat.report.phrases import status_counts, verdict

CLAIM_COLUMNS = ("claim", "paper value (source)", "ours", "where", "status", "reproduced when")
HEADER = "| " + " | ".join((*CLAIM_COLUMNS, "shown in")) + " |"
_COLUMN_WIDTHS = (14, 14, 20, 7, 19, 14, 12)
"""Relative column widths (pandoc and Quarto read them from the dashes of a pipe table's rule line when rows are
long): the claim, the values and the status get the room; "where" is one word."""


def scorecard_markdown(root: str | Path = ".") -> str:
    """The scorecard as Markdown: the counts per status in a sentence, then per paper a table with one row per
    claim. Without the index's findings, one line naming the snakemake target that makes them."""
    try:
        claims = list(load("index", root).values())
    except catalog.Missing as missing:
        return f"The scorecard is not made yet: `snakemake {missing.target}`.\n"
    lines = [status_counts(claims)]
    for paper in dict.fromkeys(f.scorecard for f in claims):
        lines += ["", f"**{paper}**", "", HEADER, "|" + "|".join("-" * w for w in _COLUMN_WIDTHS) + "|"]
        lines += [_row(f, Path(root)) for f in claims if f.scorecard == paper]
    return "\n".join(lines) + "\n"


def claim_cells(f: Finding) -> tuple[str, ...]:
    """One judged finding as a claims table shows it (the scorecard's rows; a report's own claims table):
    CLAIM_COLUMNS."""
    status = f"**{REPRODUCED}**" if f.status == REPRODUCED else verdict(f)
    paper = f"{f.paper} ({f.source})" if f.paper else "—"
    return (f.claim, paper, f.ours, f.where or "—", status, f.rule or "—")


def claims_table(found) -> pd.DataFrame:
    """Judged findings as a table, one row each (CLAIM_COLUMNS)."""
    return pd.DataFrame([claim_cells(f) for f in found], columns=list(CLAIM_COLUMNS))


def _row(f: Finding, root: Path) -> str:
    return "| " + " | ".join(_cell(c) for c in claim_cells(f)) + f" | {_link(f.link, root)} |"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _link(link: str, root: Path) -> str:
    """"[chen2016 › depth](chen2016.html#sec-depth)", without the link while that report is not rendered."""
    page, _, label = link.partition("#")
    text = f"{page.removesuffix('.html')} › {label.removeprefix('sec-')}" if label else page.removesuffix(".html")
    return f"[{text}]({link})" if (root / "reports" / page).exists() else f"{text} (not rendered yet)"
