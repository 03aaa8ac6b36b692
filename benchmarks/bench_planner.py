"""Solve time of the exact planner on 1000-layer instances with heterogeneous layers (target: ≤ 1 s each).
Prints the figure per instance and budget, for each memory model with the host limit unbound and binding, then
one summary line per case; not a timed test.

    .venv/bin/python benchmarks/bench_planner.py [--layers 1000] [--seeds 2] [--models max,prefix]
                                                 [--hosts none,binding]

Instances (all four policies per layer, budgets from 5 % to 100 % of the all-`none` activations):
* ``model``: GPT layers of random width h ∈ {1024, …, 8192} (a = h/128, s = 2048, b = 1, t = 1) with the
  planner's own costs — Korthikanti Table 2 bytes, Appendix A FLOPs on an A100 at 50 %, the break-even
  offload model on a 25.6 GB/s link — each layer holding 1–4 micro-batches in flight (pipeline position);
* ``random``: every option's stored/transient/host bytes and time drawn uniformly at random.
Memory models: ``max`` (all stored + worst transient, several micro-batches in flight) and ``prefix`` (one
micro-batch in flight). Host limits: ``none`` and ``binding`` (a quarter of the offloadable bytes: a second
knapsack row). A budget below every plan's peak times the search for the smallest budget that works.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from remat.errors import InfeasibleError
from remat.formulas import korthikanti
from remat.formulas import offload as offload_formulas
from remat.planner.mckp import SearchTooLarge
from remat.planner.problem import Layer, Option, Problem
from remat.planner.solve import solve

TARGET_S = 1.0


def model_layers(rng, L: int, rate: float = 0.5 * 312e12,
                 link: offload_formulas.Link = offload_formulas.Link.symmetric(25.6e9, 1e-5)):
    s, b = 2048, 1
    layers = []
    for i in range(L):
        h = int(rng.integers(8, 65)) * 128
        a, n = h // 128, int(rng.integers(1, 5))
        by = {m: korthikanti.layer_bytes(s, b, h, a, 1, False, m) for m in korthikanti.RECOMPUTE}
        fwd = korthikanti.layer_forward_flops(s, b, h) / rate
        exposed = offload_formulas.exposed_offload_s(by["none"], 14, fwd, 2 * fwd, link)
        layers.append(Layer(i, (
            Option("none", n * by["none"], 0, 3 * fwd),
            Option("selective", n * by["selective"], by["none"] - by["selective"],
                   3 * fwd + korthikanti.core_attn_forward_flops(s, b, h) / rate),
            Option("full", n * by["full"], by["none"] - by["full"], 4 * fwd),
            Option("offload", 0, 2 * by["none"], 3 * fwd + exposed, offload_bytes=n * by["none"]))))
    return layers


def random_layers(rng, L: int):
    layers = []
    for i in range(L):
        s = int(rng.integers(50, 200))
        layers.append(Layer(i, (
            Option("none", s, 0, float(rng.uniform(1, 2))),
            Option("selective", int(s * rng.uniform(0.4, 0.8)), int(rng.integers(5, 60)), float(rng.uniform(1, 2.5))),
            Option("full", int(rng.integers(5, 20)), int(rng.integers(40, 200)), float(rng.uniform(1.5, 3))),
            Option("offload", int(rng.integers(0, 20)), int(rng.integers(20, 220)), float(rng.uniform(1, 3)),
                   offload_bytes=int(rng.integers(30, 200))))))
    return layers


def run_case(prefix: bool, host_binds: bool, layers_count: int, seeds: int) -> tuple[float, int]:
    """Print one line per instance kind and seed; return (worst solve seconds, searches too large)."""
    fractions = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    worst, failed = 0.0, 0
    for kind, make in (("model", model_layers), ("random", random_layers)):
        for seed in range(seeds):
            layers = tuple(make(np.random.default_rng(seed), layers_count))
            total = sum(layer.options[0].stored_bytes for layer in layers)
            host = sum(layer.options[3].offload_bytes for layer in layers) // 4 if host_binds else None
            times = []
            for f in fractions:
                problem = Problem(layers, {"weights": 10**6}, 10**6 + int(f * total), host, prefix=prefix)
                start = time.perf_counter()
                try:
                    solve(problem)
                    mark = ""
                except InfeasibleError:
                    mark = " (infeasible; minimum budget found)"
                except SearchTooLarge:
                    mark, failed = " (search too large)", failed + 1
                dt = time.perf_counter() - start
                worst = max(worst, dt)
                times.append(f"{f:.2f}:{dt:.3f}s{mark}")
            print(f"{kind:6s} seed {seed}: " + "  ".join(times), flush=True)
    return worst, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--models", default="max,prefix", help="memory models: max, prefix (comma-separated)")
    parser.add_argument("--hosts", default="none,binding", help="host limits: none, binding (comma-separated)")
    args = parser.parse_args()
    summary = []
    for model in args.models.split(","):
        for host in args.hosts.split(","):
            name = f"memory model {'prefix' if model == 'prefix' else 'all stored + worst transient'}, " \
                   f"host limit {host}"
            print(f"== {name}", flush=True)
            worst, failed = run_case(model == "prefix", host == "binding", args.layers, args.seeds)
            summary.append(f"{args.layers} heterogeneous layers, {name}: worst solve {worst:.3f} s "
                           f"(target ≤ {TARGET_S} s){f'; {failed} searches too large' if failed else ''}")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
