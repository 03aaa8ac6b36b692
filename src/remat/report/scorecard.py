"""The replication scorecard of reports/index.qmd, a view over ``results/findings/index.csv`` (nothing is judged
here): the verdicts at a glance, then per paper a table with one row per claim, its verdict as a badge.

    print(verdicts_markdown("."))       # Markdown for ``output: asis`` cells (root: the project root)
    print(scorecard_markdown("."))
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from remat.analysis import catalog
from remat.analysis.findings import (INVALID, MEASURED, MINOR, NOT_MEASURED, NOT_REPRODUCED, NOT_REPRODUCIBLE, PARTIAL,
                                     REPRODUCED, Finding, load)
from remat.figures.scorecard import COLOURS
from remat.report.phrases import join_words, status_counts, verdict

CLAIM_COLUMNS = ("claim", "paper value (source)", "ours", "where", "status", "reproduced when")
HEADER = "| claim | paper (source) | ours (where) | verdict | section |\n|" + "|".join(
    "-" * w for w in (20, 20, 26, 15, 9)) + "|"
"""The scorecard's columns; the dashes give pandoc and Quarto relative widths (claim and values get the room)."""
BADGE = {REPRODUCED: "✓", MINOR: "≈", PARTIAL: "◐", NOT_REPRODUCED: "✗", NOT_REPRODUCIBLE: "⊘", INVALID: "⚠",
         NOT_MEASURED: "…", MEASURED: "·"}
"""Each status's symbol beside its colour (remat.figures.scorecard.COLOURS): a colour-blind reader has both."""


def _claims(root) -> list[Finding] | str:
    return catalog.unless_missing(lambda: list(load("index", root).values()),
                                  lambda missing: f"The scorecard is not made yet: `snakemake {missing.target}`.\n")


def badge(status: str) -> str:
    """The status as a coloured badge, symbol and word, free to wrap (nowrap widened Quarto's table past the page)."""
    symbol, colour = BADGE[status], COLOURS[status]
    return f'<span style="color:{colour};font-weight:600">{symbol}\u00a0{status}</span>'


def verdicts_markdown(root: str | Path = ".") -> str:
    """Per paper three lines: its claims counted by verdict; the claims reproduced; the others with their verdict."""
    claims = _claims(root)
    if isinstance(claims, str):
        return claims
    lines = []
    for paper in dict.fromkeys(f.scorecard for f in claims):
        mine = [f for f in claims if f.scorecard == paper]
        good = [f.claim for f in mine if f.status == REPRODUCED]
        rest = [f"{f.claim} ({BADGE[f.status]} {f.status})" for f in mine if f.status != REPRODUCED]
        lines += [f"**{paper}.** {status_counts(mine, 'headline claim')}",
                  f"✓ Reproduced: {join_words(good) if good else 'none'}.",
                  f"Apart from those: {join_words(rest) if rest else 'none'}."]
    return "\n\n".join(lines)


def scorecard_markdown(root: str | Path = ".") -> str:
    """Per paper a table with one row per claim, then the footnotes: each verdict's rule and reason."""
    claims = _claims(root)
    if isinstance(claims, str):
        return claims
    lines, notes = [], []
    for paper in dict.fromkeys(f.scorecard for f in claims):
        lines += ["", f"**{paper}**", "", HEADER]
        for f in (f for f in claims if f.scorecard == paper):
            rule = f" Rule: {f.rule}." if f.rule else ""
            notes.append(f"[^{len(notes) + 1}]: {_cell(verdict(f)).rstrip('.')}.{rule}")
            ours = f.ours if f.where and f.where in f.ours else f"{f.ours} (*{f.where or '—'}*)"
            cells = (f.claim, _paper(f), ours, f"{badge(f.status)}[^{len(notes)}]")
            lines.append("| " + " | ".join(_cell(c) for c in cells) + f" | {_link(f.link, Path(root))} |")
    return "\n".join([*lines, "", *notes]) + "\n"


def claims_table(found) -> pd.DataFrame:
    """Judged findings as a report's own claims table, one row each (CLAIM_COLUMNS)."""
    return pd.DataFrame([(f.claim, _paper(f), f.ours, f.where or "—",
                          badge(f.status) + ("" if f.status == REPRODUCED else f": {f.reason}"), f.rule or "—")
                         for f in found], columns=list(CLAIM_COLUMNS))


def _paper(f: Finding) -> str:
    return f"{f.paper} ({f.source})" if f.paper else "—"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _link(link: str, root: Path) -> str:
    """"[depth](chen2016.html#sec-depth "chen2016 › depth")", without the link while that report is not rendered."""
    page, _, label = link.partition("#")
    name = page.removesuffix(".html")
    text = label.removeprefix("sec-") or name
    return f'[{text}]({link} "{name} › {text}")' if (root / "reports" / page).exists() else \
        f"{name} › {text} (not rendered yet)"
