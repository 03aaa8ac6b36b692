"""The index's findings: every claim the scorecard lists, collected from the reports' findings (those with
``scorecard`` set), in the reports' order. A report whose findings are not made yet gives one NOT_MEASURED row
naming the snakemake target, so the scorecard says what is missing instead of failing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from remat.analysis import catalog
from remat.analysis.findings import NOT_MEASURED, Finding, load


def findings(root: str | Path = ".") -> list[Finding]:
    """The scorecard's claims in the reports' order (chen2016, korthikanti2022, sweeps, offload, planner), each
    id prefixed with its report ("chen2016.resnet")."""
    out = []
    for report in catalog.REPORTS:
        try:
            out += [replace(f, id=f"{report}.{f.id}") for f in load(report, root).values() if f.scorecard]
        except catalog.Missing as missing:
            out.append(Finding(id=f"{report}.missing", claim=f"the claims of the {report} report", ours="—",
                               status=NOT_MEASURED, reason=f"`snakemake {missing.target}`",
                               scorecard="(not made yet)", link=f"{report}.html"))
    return out
