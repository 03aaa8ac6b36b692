"""`remat check | experiment | figure | report`: the numpy checks and what the pipeline rules call."""

from __future__ import annotations

import sys
from pathlib import Path

from remat import experiments, figures
from remat.cli.args import command, emit, json_object, positive_int
from remat.errors import UsageError


def add_check(sub):
    p = command(sub, "check", "numpy gradient checks of every checkpoint schedule and memory plan (Chen 2016): "
                              "bitwise vs the plain backward, finite differences, counted bytes vs the closed forms",
                ["remat check", "remat check --layers 32 --json"], "exit 1 names the schedules that failed")
    p.add_argument("--layers", type=positive_int, default=16, help="chain length L (default 16)")
    p.add_argument("--width", type=positive_int, default=8, help="layer width d (default 8)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_run_check)


def _run_check(args) -> int:
    from remat.experiments import chen, chen_graph  # pandas and numpy: kept out of `remat --help`
    table = chen.gradient_check(layers=args.layers, width=args.width)
    graphs = chen_graph.graph_check(chen_graph.GraphCheckParams(layers=args.layers, width=args.width))
    shown = ["schedule", "bitwise_equal", "max_abs_diff_vs_naive", "fd_rel_error", "peak_bytes",
             "peak_bytes_formula", "forwards", "forwards_formula", "passed"]
    if table["error"].notna().any():
        shown.append("error")
    graphs["schedule"] = "graph:" + graphs["net"] + "/" + graphs["strategy"]
    graph_shown = ["schedule", "budget_bytes", "planned_bytes", "live_peak_bytes", "recomputed_nodes",
                   "bitwise_equal", "passed"]
    emit({"schedules": table.to_dict(orient="records"), "memory_plans": graphs.to_dict(orient="records")}, args.json,
         table[shown].to_string(index=False) + "\n\nmemory plans on graphs (§3, Algorithms 2 and 3):\n"
         + graphs[graph_shown].to_string(index=False))
    failed = table.loc[~table["passed"], "schedule"].tolist() + graphs.loc[~graphs["passed"], "schedule"].tolist()
    if failed:
        print(f"remat check: FAILED schedules: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def add_experiment(sub):
    p = command(sub, "experiment", "run one experiment and write its tidy table (CSV); what the pipeline rules call",
                ["remat experiment chen-depth --params '{\"depths\": [2, 4, 8]}' --out results/chen/depth.csv"],
                "parameters: the fields of the experiment's dataclass (config/config.yaml lists each with its "
                "default)")
    p.add_argument("name", choices=sorted(experiments.REGISTRY))
    p.add_argument("--params", type=json_object, default={}, help="experiment parameters as a JSON object")
    p.add_argument("--out", required=True, help="output CSV path (written atomically)")
    p.set_defaults(func=_run_experiment)


def _run_experiment(args) -> int:
    experiments.run_experiment(args.name, args.params, args.out)
    return 0


def add_figure(sub):
    p = command(sub, "figure", "draw one figure (PNG + SVG beside it) from result tables",
                ["remat figure chen-depth --inputs results/chen/depth.csv --out figures/chen_depth.png"])
    p.add_argument("name", choices=sorted(figures.REGISTRY))
    p.add_argument("--inputs", nargs="+", required=True, help="result CSV paths")
    p.add_argument("--out", required=True, help="output .png path; an .svg is written beside it")
    p.set_defaults(func=_run_figure)


def _run_figure(args) -> int:
    for path in args.inputs:
        if not Path(path).is_file():
            raise UsageError("--inputs", f"no such results table: {path}")
    figures.draw(args.name, args.inputs, args.out)
    return 0


def add_report(sub):
    p = command(sub, "report", "render the Quarto reports: quarto render if a quarto binary is on PATH, else the "
                               "fallback (nbclient + pandoc)",
                ["remat report", "remat report --engine fallback chen2016"])
    p.add_argument("names", nargs="*", help="report names (reports/NAME.qmd); default: all")
    p.add_argument("--engine", choices=["auto", "quarto", "fallback"], default="auto",
                   help="auto (default): quarto when on PATH, else the fallback; quarto or fallback: force one")
    p.set_defaults(func=_run_report)


def _run_report(args) -> int:
    from remat.report import RenderError, render   # pandas (the catalog): kept out of `remat --help`
    try:
        paths = render(args.names or None, engine=args.engine)
    except RenderError as exc:
        print(f"remat report: failed: {exc}", file=sys.stderr)
        return exc.exit_code
    for path in paths:
        print(path)
    return 0
