"""Tensor-granularity plans (remat.auto granularity="tensor"), measured on this CPU: solve time, and per model
and budget the measured peak against the budget and the prediction, the gradients, the predicted step time.

    python benchmarks/bench_tensor_plans.py            # both parts
    python benchmarks/bench_tensor_plans.py --solve    # only the solve-time part

Part 1, solve time (target ≤ 5 s): 80 blocks of 30 saved tensors each — the kept-set frontier of each
(remat.planner.keepsets, exact) and the exact plan over the blocks (remat.planner.solve) at nine budgets. Three
cases: 80 identical blocks (a transformer: one frontier), 80 different blocks (each its own sizes and seconds,
drawn with a fixed seed from a few tensor sizes as real blocks have), and 80 identical blocks whose frontier sets
are also offered offloaded (twice the options: per-tensor offload, remat.auto.tensor_offload).

Part 2, the pipeline's planner-tensor experiment (remat.experiments.tensor_plans) at its defaults: three models,
one training step each (loss = output sum; no optimizer, so optimizer_state_bytes=0), torch at one thread,
measured by remat.measure.peak.PeakMemory (torch's MemTracker) in this process: a 6-layer pre-norm transformer
(d = 128, s = 128, b = 2), a tiny HF Llama (4 layers, hidden 128, s = 128, b = 2; needs transformers) and a conv
net (4 residual conv–GroupNorm blocks, 32 channels, 32×32, b = 4). Six budgets from the every-block-full peak to
the no-recompute peak, evenly spaced; per budget the tensor plan and the per-block plan: predicted peak and step
time, measured peak, whether gradients are bitwise the plain model's. torch.compile's activation_memory_budget is
not run here (not built yet).
"""

from __future__ import annotations

import argparse
import random
import time

from remat.experiments.tensor_plans import TensorParams, tensor_plans
from remat.planner import keepsets
from remat.planner.problem import Layer, Option, Problem, plan_from_policies
from remat.planner.solve import solve
from remat.formulas.offload import exposed_offload_s
from remat.timemodel.gpus import gpu
from remat.units import MiB


def _block_options(rng: random.Random, tensors: int = 30, offload: bool = False) -> tuple[Option, ...]:
    """One synthetic block: none, full, and the frontier of ``tensors`` candidate outputs as selective options;
    with ``offload`` each frontier set also all offloaded ("o": its bytes leave the stored and count twice in the
    transient, its copies on the H100 preset's link beyond the block's forward and backward exposed), as
    remat.auto.tensors.BlockOps.served_cost prices it."""
    sizes = [rng.choice([2, 8, 8, 32]) * MiB for _ in range(tensors)]
    seconds = [s * rng.choice([0.3, 1.0, 4.0]) / 3e12 for s in sizes]
    stored_none, full_transient, base = sum(sizes) // 2, sum(sizes) // 2, 6e-4
    options = [Option("none", stored_none, full_transient // 4, base),
               Option("full", 8 * MiB, full_transient, base + sum(seconds))]
    link = gpu("h100-80gb").link
    for n, point in enumerate(keepsets.frontier(list(zip(sizes, seconds)))[1:], start=1):
        stored, transient = 8 * MiB + point.nbytes, max(0, full_transient - point.nbytes // 2)
        time_s = base + sum(seconds) - point.seconds
        options.append(Option("selective", stored, transient, time_s, variant=f"k{n}"))
        if offload:
            exposed = exposed_offload_s(point.nbytes, len(point.items), base / 3, 2 * base / 3, link)
            options.append(Option("selective", 8 * MiB, transient + 2 * point.nbytes, time_s + exposed,
                                  offload_bytes=point.nbytes, variant=f"o{n}"))
    return tuple(options)


def solve_time() -> None:
    worst = 0.0
    for case in ("identical", "different", "offload"):
        start = time.perf_counter()
        rng = random.Random(0)
        if case == "different":
            layers = tuple(Layer(i, _block_options(rng)) for i in range(80))
        else:
            options = _block_options(rng, offload=case == "offload")
            layers = tuple(Layer(i, options) for i in range(80))
        built = time.perf_counter() - start
        ends = Problem(layers, {"fixed": 0}, 0, prefix=True)
        least, most = (plan_from_policies(ends, [p] * 80).peak_bytes for p in ("full", "none"))
        for fraction in [k / 10 for k in range(1, 10)]:
            problem = Problem(layers, {"fixed": 0}, int(least + (most - least) * fraction), prefix=True)
            t = time.perf_counter()
            plan = solve(problem)
            seconds = time.perf_counter() - t
            worst = max(worst, seconds)
            print(f"{case:>9} blocks, {len(layers[0].options)}–{max(len(x.options) for x in layers)} options per "
                  f"block: frontiers {built:.2f} s, solve at {fraction:.0%} of full → none {seconds:.2f} s "
                  f"(optimal {plan.optimal}; "
                  f"{', '.join(f'{p} {plan.policies.count(p)}' for p in ('none', 'selective', 'full'))})")
    print(f"80 blocks × 30 tensors: worst solve {worst:.2f} s (target ≤ 5 s)")


def measured(points: int = 10) -> None:
    """Part 2: the planner-tensor experiment (remat.experiments.tensor_plans) at its default models, printed."""
    frame = tensor_plans(TensorParams(points=points))
    for model, rows in frame.groupby("model", sort=False):
        if "skipped" in rows and rows["skipped"].notna().all():
            print(f"\n{model}: skipped, {rows['skipped'].iloc[0]}")
            continue
        first = rows.iloc[0]
        print(f"\n{model}: every block full {first['full_peak_bytes'] / MiB:.1f} MiB, no recompute "
              f"{first['none_peak_bytes'] / MiB:.1f} MiB (predicted)")
        print(f"{'budget MiB':>10} {'plan':>7} {'predicted':>10} {'measured':>10} {'error B':>10} {'step ms':>9} "
              f"{'fits':>5} {'bitwise':>8} {'plan s':>7}")
        for r in rows.itertuples():
            fits = "yes" if r.measured_peak_bytes <= r.budget_bytes else "NO"
            print(f"{r.budget_bytes / MiB:>10.1f} {r.granularity:>7} {r.predicted_peak_bytes / MiB:>10.2f} "
                  f"{r.measured_peak_bytes / MiB:>10.2f} {int(r.peak_error_bytes):>+10d} "
                  f"{r.predicted_step_time_s * 1e3:>9.3f} {fits:>5} {'yes' if r.grads_bitwise else 'NO':>8} "
                  f"{r.plan_s:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solve", action="store_true", help="only the solve-time part")
    parser.add_argument("--measured", action="store_true", help="only the measured part")
    args = parser.parse_args()
    if args.solve or not args.measured:
        solve_time()
    if not args.solve:
        measured()


if __name__ == "__main__":
    main()
