"""The index's findings: every claim the scorecard lists, collected from the reports' findings (those with
``scorecard`` set), in the reports' order. A report whose findings are not made yet gives one NOT_MEASURED row
under its paper naming the snakemake target, so the scorecard says what is missing instead of failing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from remat.analysis import catalog
from remat.analysis.findings import NOT_MEASURED, Finding, load
from remat.paper import CHEN, KORTHIKANTI

CLAIMS_OF = {"chen2016": CHEN, "korthikanti2022": KORTHIKANTI, "sweeps": KORTHIKANTI, "planner": KORTHIKANTI}
"""Whose claims each report judges for the scorecard (the offload report replicates no paper's claim)."""


def findings(root: str | Path = ".") -> list[Finding]:
    """The scorecard's claims in the reports' order (chen2016, korthikanti2022, sweeps, offload, planner), each
    id prefixed with its report ("chen2016.resnet")."""
    out = [f for report, paper in CLAIMS_OF.items() for f in catalog.unless_missing(
        lambda: [replace(f, id=f"{report}.{f.id}") for f in load(report, root).values() if f.scorecard],
        lambda missing: [Finding(id=f"{report}.missing", claim=f"The {paper} claims the {report} report judges",
                                 ours="—", status=NOT_MEASURED, reason=f"snakemake {missing.target}",
                                 scorecard=paper, link=f"{report}.html")])]
    return sorted(out, key=lambda f: f.scorecard != CHEN)   # Chen's first, each paper's in the reports' order
