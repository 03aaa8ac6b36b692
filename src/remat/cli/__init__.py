"""remat: activation recomputation replicated (Chen 2016, Korthikanti 2022) and planned per layer.

Contract (scripts, rules and reports depend on these names; tests/test_cli_help.py checks every command is here):
    remat check      [--layers N] [--json]
    remat account    --model M --mode none|selective|full [--tp T] [--sp] [--seq S] [--micro-batch B] [--json]
    remat measure    --model M --policy P --device cpu|cuda|fake [--layers N] [--seq S] [--micro-batch B] [--json]
    remat bandwidth  --device cpu|cuda [--json]
    remat plan       --model M --memory 80GiB [...] [--format md|json|hf|nemo|torchtitan|sac|all] [--out FILE]
    remat explain    --model M [--checkpointing P] [--device fake|cpu] [--json]
    remat memplan    --net resnet|lstm [--depth N | --length T] [--strategy S ...] [--budget B] [--json]
    remat findings   NAME                              (pipeline rules: result tables -> results/findings/NAME.csv)
    remat report     [--engine auto|quarto|fallback] [NAME ...]
    remat experiment NAME --params JSON --out FILE     (pipeline rules: one tidy table per call)
    remat figure     NAME --inputs CSV... --out PNG    (pipeline rules: tables -> one figure, PNG + SVG)

Exit codes: 0 ok; 1 a check failed (remat plan: the exact search hit its memory guard); 2 bad input (one line
naming the field, nothing written); 3 infeasible plan (names the smallest budget that works); 130 / 143 interrupted
(SIGINT / SIGTERM; temp files removed).
"""

from __future__ import annotations

import argparse
import sys

from remat import __version__
from remat.cli import explain, findings, memplan, pipeline, plan, runtime
from remat.cli.args import Parser
from remat.errors import InfeasibleError, UsageError
from remat.interrupt import exit_on_interrupt


def _sections():
    return [pipeline.add_check, pipeline.add_experiment, pipeline.add_figure, findings.add_findings,
            pipeline.add_report, runtime.add_bandwidth, runtime.add_measure, runtime.add_account, plan.add_plan,
            memplan.add_memplan, explain.add_explain]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="remat", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in _sections():
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    with exit_on_interrupt():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"remat {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except InfeasibleError as exc:
        print(f"remat {args.command}: infeasible: {exc}", file=sys.stderr)
        return exc.exit_code
    except (MemoryError, RuntimeError) as exc:
        from remat.device import is_out_of_memory  # imports torch: kept out of `remat --help` and torch-free commands
        if not is_out_of_memory(exc):
            raise
        detail = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        hint = ("use a smaller --depth / --length / --batch" if args.command == "memplan" else
                "use smaller --seq / --micro-batch / --layers, or --device fake")
        print(f"remat {args.command}: error: does not fit in memory ({detail}); {hint}", file=sys.stderr)
        return UsageError.exit_code
