"""The floor of an eager tensor plan on this CPU: what torch's selective checkpoint costs when it recomputes
(almost) nothing, beside its predicted cost.

    python benchmarks/bench_sac_floor.py            # the planner-tensor experiment's three models
    python benchmarks/bench_sac_floor.py --small    # small instances of the same three

Per model (remat.experiments.tensor_plans.build), three versions of one training step in eager, each planned by
remat.auto at an unlimited budget and applied to its own copy of the model:
* ``none``: the model as it is (choices none);
* ``keep-all``: every block selective with its largest kept set (granularity "tensor", choices selective: every op
  output that may be kept is kept, so the recompute re-runs only views, in-place ops and the block's returned
  op): the least any selective (SAC) plan recomputes;
* ``full``: every block under a plain checkpoint (choices full).
The versions' steps run interleaved (one step of each per round, ``rounds`` rounds after a warm-up step each);
printed per version: the median step (ms), its IQR, the ratio to ``none``, and the predicted ratio (the plan's
step time on the GPU preset, roofline, over none's). One profiled step per version counts torch's Python
dispatch-mode calls (``PythonDispatchMode`` events: the selective checkpoint's caching modes run one per op of
the forward and of the recompute) and their self time. torch at one thread; run it alone.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch
from torch.profiler import profile

from remat import auto
from remat.experiments.tensor_plans import TensorModel, TensorParams, build

SMALL = [TensorModel("transformer", 4, 128, 128, 2), TensorModel("llama", 4, 128, 128, 2),
         TensorModel("conv", 4, 32, 32, 4)]
VERSIONS = {"none": (("none",), "block"), "keep-all": (("selective",), "tensor"), "full": (("full",), "block")}


def versions(spec: TensorModel) -> tuple[dict, dict, object]:
    """(version -> (applied model, predicted step s), inputs, loss) of ``spec`` (module docstring)."""
    model, inputs, loss_fn = build(spec, "cpu")
    out = {}
    for name, (choices, granularity) in VERSIONS.items():
        run = copy.deepcopy(model)
        result = auto.plan(run, inputs, budget=2**50, loss_fn=loss_fn, optimizer_state_bytes=0, choices=choices,
                           granularity=granularity)
        auto.apply(run, result)
        out[name] = (run, result.plan.step_time_s)
    return out, inputs, loss_fn


def dispatch_calls(step) -> tuple[int, float]:
    """(PythonDispatchMode events, their self milliseconds) of one profiled ``step()``."""
    with profile() as prof:
        step()
    rows = [e for e in prof.key_averages() if e.key == "PythonDispatchMode"]
    return (rows[0].count, rows[0].self_cpu_time_total / 1e3) if rows else (0, 0.0)


def measure(spec: TensorModel, rounds: int) -> None:
    models, inputs, loss_fn = versions(spec)

    def stepper(run):
        def step():
            loss_fn(run(*inputs)).backward()
            for p in run.parameters():
                p.grad = None
        return step
    steps = {name: stepper(run) for name, (run, _) in models.items()}
    times: dict[str, list[float]] = {name: [] for name in steps}
    calls = {name: dispatch_calls(step) for name, step in steps.items()}   # also the warm-up step
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    base, predicted_base = statistics.median(times["none"]), models["none"][1]
    print(f"{'version':>9} {'step ms':>9} {'IQR ms':>7} {'× none':>7} {'predicted × none':>17} "
          f"{'dispatch calls':>15} {'their ms':>9}")
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4)
        print(f"{name:>9} {statistics.median(ts) * 1e3:>9.1f} {(q[2] - q[0]) * 1e3:>7.1f} "
              f"{statistics.median(ts) / base:>7.3f} {models[name][1] / predicted_base:>17.3f} "
              f"{calls[name][0]:>15} {calls[name][1]:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small instances of the three models")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (one step of each version)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, one thread; load average {os.getloadavg()[0]:.2f} at the start")
    for spec in SMALL if args.small else TensorParams().models:
        print(f"\n{spec}")
        measure(spec, args.rounds)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
