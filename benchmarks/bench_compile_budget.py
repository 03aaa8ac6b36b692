"""torch.compile's activation_memory_budget beside remat's tensor plans, on this CPU: peak and step time per point.

    python benchmarks/bench_compile_budget.py            # the planner-tensor experiment's three models
    python benchmarks/bench_compile_budget.py --small    # small instances of the same three (about 6 minutes)

Per model (remat.experiments.tensor_plans.build, the pipeline's planner-tensor models; the Llama without a KV
cache, as it trains), four kinds of point, each in a fresh process (compiled code and the allocator's state do
not carry over):
* ``compile``: torch.compile (inductor) with torch._functorch.config.activation_memory_budget = b, b from 1.0
  (save what the min-cut partitioner would) down to 0.0 (recompute what it can);
* ``eager``: the model as it is, in eager (no plan): the step that fusion alone shortens;
* ``eager tensor``: remat.auto's tensor plan (granularity="tensor") planned with each compile point's measured
  peak as its budget — the comparison at equal peak — and at the every-block-full and the no-recompute peaks;
  applied in eager;
* ``compiled tensor``: the tensor plan for a compiled model (``compiled=True``: priced at fused rates, so it
  keeps what costs FLOPs to recompute) at the same budgets, applied, then torch.compile (remat's checkpoint
  hands torch the plan's per-op policy; inductor's partitioner then keeps MUST_SAVE outputs and recomputes the
  rest).
Each point: one step to warm up (it compiles), one step under torch.profiler (profile_memory, record_shapes,
with_stack) whose memory timeline gives the peak — every point is measured by the profiler, eager ones too
(MemTracker runs a compiled model eagerly, so it cannot measure compiled code; the profiler also sees
allocations inside kernels, e.g. convolution scratch, so its eager peaks can exceed remat's prediction, which is
MemTracker's accounting: both are printed) — then ``repeats`` timed steps (median). Points run in ``rounds``
interleaved rounds (every point once, then again: a process's step time varies by several percent with where
its memory lands); a point's step time is the median of its rounds' medians, its peak the largest. torch at
one thread. Step times are this CPU's, not a GPU's: inductor's CPU kernels fuse pointwise ops that eager runs
one by one. Run it alone.

Prints per model the points, then for each compile point the fastest eager and compiled tensor plan whose
measured peak is at most compile's: their step time over compile's.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch._functorch.config as functorch_config
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action

from remat import auto
from remat.experiments.tensor_plans import TensorModel, TensorParams, build
from remat.units import MiB

BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)
FULL, NONE = -1, -2
"""A tensor point's budget meaning: the predicted peak of every block full (the least a plan reaches), of no
recompute (the most a plan needs)."""
SMALL = [TensorModel("transformer", 4, 128, 128, 2), TensorModel("llama", 4, 128, 128, 2),
         TensorModel("conv", 4, 32, 32, 4)]


def profiled_peak(step) -> int:
    """The most bytes alive during ``step()``, from torch.profiler's memory timeline (tensors existing before the
    step included)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    live = peak = 0
    for _, action, _, nbytes in prof._memory_profile().timeline:
        if action in (Action.PREEXISTING, Action.CREATE):
            live += nbytes
        elif action == Action.DESTROY:
            live -= nbytes
        peak = max(peak, live)
    return peak


def point(spec: TensorModel, mode: str, value: float, repeats: int) -> dict:
    """One point (module docstring), in this process."""
    torch.set_num_threads(1)
    model, inputs, loss_fn = build(spec, "cpu")
    out = {"model": spec.kind, "mode": mode, "value": value}
    if mode == "compile":
        functorch_config.activation_memory_budget = value
        run = torch.compile(model)
    elif mode == "eager":
        run = model
    else:
        plan = lambda budget, **kw: auto.plan(model, inputs, budget=budget, loss_fn=loss_fn, optimizer_state_bytes=0,
                                              compiled=mode == "compiled tensor", **kw)
        ends = {FULL: ("full",), NONE: ("none",)}
        budget = plan(2**62, choices=ends[value]).plan.peak_bytes if value in ends else int(value)
        result = plan(budget, choices=("none", "selective", "full"), granularity="tensor")
        run = copy.deepcopy(model)
        auto.apply(run, result)
        out.update(predicted_peak=result.plan.peak_bytes, kept=sum(k is not None for k in result.kept_sets))
        run = torch.compile(run) if mode == "compiled tensor" else run

    def step():
        loss_fn(run(*inputs)).backward()
        for p in run.parameters():
            p.grad = None
    start = time.perf_counter()
    step()
    out["first_step_s"] = time.perf_counter() - start
    out["peak"] = profiled_peak(step)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    out["step_s"] = statistics.median(times)
    return out


def _fresh(spec: TensorModel, mode: str, value: float, repeats: int) -> dict:
    arg = json.dumps({"spec": vars(spec), "mode": mode, "value": value, "repeats": repeats})
    proc = subprocess.run([sys.executable, __file__, "--point", arg], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode:
        return {"model": spec.kind, "mode": mode, "value": value, "error": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _model_rows(spec: TensorModel, rounds: int, repeats: int) -> list[dict]:
    """Every point of ``spec`` (module docstring), each run once per round, rounds interleaved; merged."""
    points = [("compile", b) for b in BUDGETS]
    runs = [[_fresh(spec, mode, value, repeats) for mode, value in points]]
    budgets = [FULL, *sorted({r["peak"] for r in runs[0] if "peak" in r}), NONE]
    tensor = [(mode, b) for mode in ("eager tensor", "compiled tensor") for b in budgets] + [("eager", 0)]
    runs[0] += [_fresh(spec, mode, value, repeats) for mode, value in tensor]
    points += tensor
    for _ in range(rounds - 1):
        runs.append([_fresh(spec, mode, value, repeats) for mode, value in points])
    return [_merged(list(rs)) for rs in zip(*runs)]


def _merged(runs: list[dict]) -> dict:
    """One point over its rounds: the median step time of the rounds' medians, the largest peak (a peak that
    differs between rounds is printed: it should not), or the first failure."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    out = {**runs[0], "step_s": statistics.median(r["step_s"] for r in runs), "peak": max(r["peak"] for r in runs)}
    out["round_ms"] = " ".join(f"{r['step_s'] * 1e3:.0f}" for r in runs)
    if len({r["peak"] for r in runs}) > 1:
        out["round_ms"] += " (peaks " + " ".join(f"{r['peak'] / MiB:.2f}" for r in runs) + " MiB)"
    return out


def _setting(r: dict) -> str:
    """A point's knob as printed: compile's budget fraction, or a tensor plan's budget (MiB, "full" or "none")."""
    if r["mode"] == "compile":
        return f"b = {r['value']:.1f}"
    if r["mode"] == "eager":
        return "no plan"
    return {FULL: "full", NONE: "none"}.get(r["value"]) or f"{r['value'] / MiB:.1f} MiB"


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
