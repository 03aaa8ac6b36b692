"""torch.compile's activation_memory_budget beside remat's tensor plans, on this CPU: peak and step time per point.

    python benchmarks/bench_compile_budget.py            # the planner-tensor experiment's three models
    python benchmarks/bench_compile_budget.py --small    # small instances of the same three (about 6 minutes)

The points and how each is measured: remat.experiments.compile_budget (the pipeline's planner-compile rule, which
writes the same rows to results/planner/compile/<device>.csv). This script runs that experiment on this CPU and
prints, per model, the points, then for each compile point the fastest eager and compiled tensor plan whose
measured peak is at most compile's: their step time over compile's. Run it alone.
"""

from __future__ import annotations

import argparse
import os

import torch

from remat.experiments.compile_budget import CompileParams, compile_budget
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
    return r["setting"] or f"{r['budget_bytes'] / MiB:.1f} MiB"


def _report(rows: list[dict]) -> None:
    print(f"{'mode':>16} {'setting':>12} {'peak MiB':>9} {'step ms':>9} {'first s':>8} {'predicted MiB':>14}  "
          "rounds ms")
    for r in rows:
        if "error" in r:
            print(f"{r['mode']:>16} {_setting(r):>12}  failed: {r['error']}")
            continue
        predicted = f"{r['predicted_peak'] / MiB:>14.2f}" if "predicted_peak" in r else f"{'':>14}"
        print(f"{r['mode']:>16} {_setting(r):>12} {r['peak'] / MiB:>9.2f} {r['step_s'] * 1e3:>9.1f} "
              f"{r['first_step_s']:>8.1f} {predicted}  {r['round_ms']}")
    ok = [r for r in rows if "error" not in r]
    for r in (r for r in ok if r["mode"] == "compile"):
        line = f"  compile b = {r['value']:.1f} ({r['peak'] / MiB:.1f} MiB, {r['step_s'] * 1e3:.1f} ms):"
        for mode in ("eager tensor", "compiled tensor"):
            fits = [x for x in ok if x["mode"] == mode and x["peak"] <= r["peak"]]
            best = min(fits, key=lambda x: x["step_s"], default=None)
            line += (f" {mode} at or below its peak: none reaches it;" if best is None else
                     f" {mode} {best['peak'] / MiB:.1f} MiB, {best['step_s'] / r['step_s'] - 1:+.1%};")
        print(line)
    plain = next((x for x in ok if x["mode"] == "eager"), None)
    first = next((x for x in ok if x["mode"] == "compile" and x["value"] == 1.0), None)
    if plain and first:
        print(f"  eager without a plan: {plain['step_s'] * 1e3:.1f} ms, {plain['step_s'] / first['step_s'] - 1:+.1%} "
              "over compile b = 1.0 (no eager plan's step is shorter)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small instances of the three models")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per point (median)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (every point once per round)")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        p = json.loads(args.point)
        print(json.dumps(point(TensorModel(**p["spec"]), p["mode"], p["value"], p["repeats"])))
        return
    load = os.getloadavg()[0]
    specs = SMALL if args.small else TensorParams().models
    print(f"torch {torch.__version__}, one thread; load average {load:.2f} at the start")
    for spec in specs:
        print(f"\n{spec}")
        _report(_model_rows(spec, args.rounds, args.repeats))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
