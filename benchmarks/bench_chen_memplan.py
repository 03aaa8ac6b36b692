"""Chen et al. 2016 at the paper's sizes: the 1,000-layer ResNet accounted under fake tensors (target ≤ 60 s on
this 2-core machine), and the wall time of the Chen part of the pipeline (target: adds ≤ 90 s to `make all`).

    .venv/bin/python benchmarks/bench_chen_memplan.py [--depth 1000] [--pipeline] [--cores N]

Prints build + trace seconds, then per strategy the planned / live-peak GiB and planning seconds, and the
total. With --pipeline: copies the project to a temp dir and times `snakemake reports/chen2016.html` (every
Chen table, figure and the report, nothing else; the report's render included).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def account(depth: int) -> None:
    from remat.experiments.chen_graph import ResNetParams, resnet_graph, strategy_rows
    from remat.graph.strategies import STRATEGIES
    from remat.units import GiB

    start = time.perf_counter()
    graph = resnet_graph(depth, ResNetParams())
    traced = time.perf_counter() - start
    print(f"{graph.name}: {len(graph.nodes)} nodes, built + traced under fake tensors in {traced:.1f} s")
    for row in strategy_rows(graph, [*STRATEGIES, "sqrt", "optimal"], 6):
        print(f"  {row['strategy']:10s} planned {row['planned_bytes'] / GiB:7.2f} GiB  live peak "
              f"{row['live_peak_bytes'] / GiB:7.2f} GiB  recomputed {row['recompute_ratio']:.2f}  "
              f"planned in {row['plan_s']:.2f} s")
    total = time.perf_counter() - start
    print(f"accounted in {total:.1f} s (target ≤ 60 s)")


def pipeline(cores: str) -> None:
    from conftest import copy_project, snakemake

    with tempfile.TemporaryDirectory() as tmp:
        project = copy_project(Path(tmp))
        start = time.perf_counter()
        proc = snakemake(project, "--cores", cores, "reports/chen2016.html", timeout=3600)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        print(f"Chen part of the pipeline (every chen table, figure and the report): {wall:.1f} s on {cores} cores")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--pipeline", action="store_true", help="also time the Chen rules of the pipeline")
    ap.add_argument("--cores", default="all")
    args = ap.parse_args()
    account(args.depth)
    if args.pipeline:
        pipeline(args.cores)


if __name__ == "__main__":
    main()
