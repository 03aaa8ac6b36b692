"""torch.compile's activation_memory_budget beside remat's tensor plans, on this CPU: peak and step time per point.

    python benchmarks/bench_compile_budget.py            # the planner-tensor experiment's three models
    python benchmarks/bench_compile_budget.py --small    # small instances of the same three (about 6 minutes)
    python benchmarks/bench_compile_budget.py --small --paired   # then each compile budget paired step by step

The points and how each is measured: remat.experiments.compile_budget (the pipeline's planner-compile rule, which
writes the same rows to results/planner/compile/<device>.csv). This script runs that experiment on this CPU and
prints, per model, the points, then for each compile point the candidate eager and compiled tensor plan (the one
planned with the largest budget whose measured peak is at most compile's, remat.experiments.compile_paired): their
step time over compile's from separate processes and, with --paired, timed step by step in one process (the
planner-paired rule). Run it alone.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

from remat.analysis.planner_compile import PLANS, comparison
from remat.experiments.compile_budget import CompileParams, compile_budget
from remat.experiments.compile_paired import PairedParams, compile_paired
from remat.experiments.tensor_plans import TensorModel
from remat.units import MiB

SMALL = [TensorModel("transformer", 4, 128, 128, 2), TensorModel("llama", 4, 128, 128, 2),
         TensorModel("conv", 4, 32, 32, 4)]


def _setting(r: dict) -> str:
    """A point's knob as printed: compile's budget fraction, or a tensor plan's budget (MiB, "full" or "none")."""
    if r["mode"] == "compile":
        return f"b = {r['compile_budget']:.1f}"
    if r["mode"] == "eager":
        return "no plan"
    return r["setting"] if isinstance(r["setting"], str) and r["setting"] else f"{r['budget_bytes'] / MiB:.1f} MiB"


def _report(frame, paired=None) -> None:
    """The points, then per compile budget the candidate eager and compiled tensor plan at or below its peak."""
    print(f"{'mode':>16} {'setting':>12} {'peak MiB':>9} {'step ms':>9} {'first s':>8} {'predicted MiB':>14}  "
          "rounds ms")
    for r in frame.to_dict("records"):
        if isinstance(r.get("error"), str):
            print(f"{r['mode']:>16} {_setting(r):>12}  failed: {r['error']}")
            continue
        predicted = r.get("predicted_peak_bytes")
        shown = f"{predicted / MiB:>14.2f}" if predicted == predicted and predicted is not None else f"{'':>14}"
        print(f"{r['mode']:>16} {_setting(r):>12} {r['peak_bytes'] / MiB:>9.2f} {r['step_s'] * 1e3:>9.1f} "
              f"{r['first_step_s']:>8.1f} {shown}  {r['round_ms']}")
    for c in comparison(frame, paired).to_dict("records"):
        line = f"  compile b = {c['budget']:.1f} ({c['peak'] / MiB:.1f} MiB, {c['step'] * 1e3:.1f} ms):"
        for mode, key in PLANS:
            line += (f" {mode}: none reaches its peak;" if c[f"{key}_peak"] != c[f"{key}_peak"] else
                     f" {mode} {c[f'{key}_peak'] / MiB:.1f} MiB, {c[f'{key}_ratio']:+.1%}"
                     + ("" if c[f"{key}_paired"] != c[f"{key}_paired"] else f", paired {c[f'{key}_paired']:+.1%}")
                     + ";")
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small instances of the three models")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per point (median)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (every point once per round)")
    parser.add_argument("--paired", action="store_true", help="then time each compile budget against its plans "
                                                              "step by step in one process")
    args = parser.parse_args()
    params = CompileParams(rounds=args.rounds, repeats=args.repeats, **({"models": SMALL} if args.small else {}))
    print(f"torch {torch.__version__}, one thread; load average {os.getloadavg()[0]:.2f} at the start")
    frame, paired = compile_budget(params), None
    if args.paired:
        with tempfile.TemporaryDirectory() as tmp:
            frame.to_csv(Path(tmp) / "compile.csv", index=False)
            paired = compile_paired(PairedParams(table=str(Path(tmp) / "compile.csv")))
    for model, rows in frame.groupby("model", sort=False):
        print(f"\n{model}")
        _report(rows, None if paired is None else paired[paired["model"] == model])
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
