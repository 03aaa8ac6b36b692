"""The analysis layer: result tables -> findings (``remat.analysis.findings``), the one judge of every claim.

    from remat.analysis import catalog, findings
    frame = catalog.read("korthikanti.table2")               # a result table by its id (catalog: one home of paths)
    F = findings.load("korthikanti2022")                      # results/findings/korthikanti2022.csv, by id
    F["table4.selective"].ours, F["table4.selective"].status

One module per report (``chen2016``, ``korthikanti2022``, ``sweeps``, ``offload``, ``planner``), each with
``findings(root) -> list[Finding]`` and the display tables its report shows; ``index`` collects the claims the
scorecard lists. Paper values live in ``remat.paper`` (a leaf: experiments write them beside their
measurements), tolerances in ``remat.analysis.tolerances``. Reports never judge: they look findings up.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from remat.analysis import catalog, findings as _findings
from remat.errors import UsageError


def write_findings(report: str, root: str | Path = ".") -> Path:
    """The findings of one report (``catalog.REPORTS``, or "index": the claims the scorecard lists), computed from
    the result tables under ``root`` by its module, written atomically to ``results/findings/<report>.csv``;
    returns that path. UsageError("name") names an unknown report, UsageError(its tables) a table that lacks
    what the analysis reads."""
    if report not in (*catalog.REPORTS, "index"):
        raise UsageError("name", f"unknown report {report!r}; one of {', '.join((*catalog.REPORTS, 'index'))}")
    try:
        found = importlib.import_module(f"remat.analysis.{report}").findings(root)   # one module per report
    except (KeyError, IndexError) as exc:   # a table from another version of remat, or cut at a row boundary
        target = catalog.target(f"findings.{report}")
        raise UsageError(f"results tables of {report}", f"a table lacks what the analysis reads ({exc}); remake "
                                                        f"them: snakemake -f {target}") from None
    out = catalog.path(f"findings.{report}", root=root)
    _findings.write(found, out)
    return out
