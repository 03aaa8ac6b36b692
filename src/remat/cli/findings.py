"""`remat findings NAME`: a report's result tables -> its findings, ``results/findings/NAME.csv`` (what the
pipeline's findings rules call; the reports and the index's scorecard read these files)."""

from __future__ import annotations

import sys

from remat.cli.args import command


def add_findings(sub):
    p = command(sub, "findings", "judge a report's claims: its result tables -> results/findings/NAME.csv (one row "
                                 "per finding: claim, ours, the paper's value and source, rule, status, reason)",
                ["remat findings korthikanti2022", "remat findings index"],
                "a missing table gives 'not measured' findings naming the snakemake target; index collects the "
                "claims the scorecard lists from the other reports' findings; offload judges the tables of the "
                "device REMAT_OFFLOAD_DEVICE names (default cpu)")
    p.add_argument("name", help="the report: chen2016, korthikanti2022, sweeps, offload, planner or index")
    p.set_defaults(func=_run_findings)


def _run_findings(args) -> int:
    from remat.analysis import write_findings   # here: pandas would slow every `remat --help`
    out = write_findings(args.name)
    print(out, file=sys.stdout)
    return 0
