"""Runs the whole pipeline twice in a temp copy: its wall time, the no-op rerun's, each rule's wall and CPU time.

Every figure is stated with the machine: CPU model, torch's CPU capability (AVX2 / AVX512 / ...), whether bfloat16
is native (targets on a 2-core CPU without native bf16: `make all` from a fresh clone ≤ 5 min with the install,
so the run itself ≤ 4 min; no-op rerun ≤ 2 s).

    .venv/bin/python benchmarks/bench_pipeline.py [--cores N] [--configfile FILE ...]

Copies the project (files git would ship) to a temp dir, runs `snakemake --cores N` there (cold: no results, no
.snakemake), then again (nothing to do), and prints both wall times; then, from the `benchmark:` TSVs every rule
writes (logs/benchmarks/<rule>/...tsv: Snakemake's per-job wall time `s` and `cpu_time`, seconds), each rule's jobs,
summed wall and CPU seconds and largest max RSS, slowest first. The load average (1, 5, 15 min) before and after
says whether the machine was quiet. `--configfile` (repeatable) layers a config over the defaults, e.g. a small one
for a quick check. Not a test: it prints its figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import copy_project, snakemake  # noqa: E402


def rule_times(project: Path) -> pd.DataFrame:
    """One row per rule from ``project``'s logs/benchmarks/**.tsv: jobs, wall_s and cpu_s (sums, seconds),
    max_rss_mb (largest, MB as Snakemake writes it), sorted by wall_s, largest first."""
    root = project / "logs" / "benchmarks"
    frames = []
    for tsv in sorted(root.rglob("*.tsv")):
        frame = pd.read_csv(tsv, sep="\t", na_values=["-", "NA"])
        frame["rule"] = tsv.relative_to(root).parts[0].removesuffix(".tsv")
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["jobs", "wall_s", "cpu_s", "max_rss_mb"])
    table = pd.concat(frames).groupby("rule").agg(jobs=("s", "size"), wall_s=("s", "sum"), cpu_s=("cpu_time", "sum"),
                                                  max_rss_mb=("max_rss", "max"))
    return table.sort_values("wall_s", ascending=False)


def machine() -> str:
    """The CPU the times were taken on: model, cores, torch's capability and native bf16 or not (remat.precision)."""
    from remat.measure.provenance import device_name
    from remat.precision import cpu_bf16, precision
    native, evidence = cpu_bf16()
    return (f"{device_name('cpu')}, {os.cpu_count()} CPUs; {evidence}: bfloat16 "
            f"{'native' if native else 'emulated'}; sweeps' dtype 'auto' -> {precision('auto', 'cpu').dtype}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", default="all")
    ap.add_argument("--configfile", action="append", default=[], help="layered over config/config.yaml")
    args = ap.parse_args()
    extra = [a for f in args.configfile for a in ("--configfile", str(Path(f).resolve()))]
    print(f"machine              {machine()}")
    print(f"load average before  {load()}  (--cores {args.cores})")
    with tempfile.TemporaryDirectory() as tmp:
        project = copy_project(Path(tmp))
        walls = {}
        for label in ("full run", "no-op rerun"):
            start = time.perf_counter()
            proc = snakemake(project, "--cores", args.cores, *extra, timeout=3600)
            walls[label] = time.perf_counter() - start
            if proc.returncode != 0:
                sys.exit(f"{label} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
            print(f"{label:12s} {walls[label]:8.1f} s")
        table = rule_times(project)
    print(f"load average after   {load()}")
    print("\nper rule (logs/benchmarks: Snakemake's benchmark TSVs; wall and CPU seconds summed over its jobs)")
    print(table.to_string(float_format=lambda x: f"{x:.1f}"))
    total = table["wall_s"].sum()
    print(f"\njobs' wall time summed {total:.1f} s over a {walls['full run']:.1f} s run "
          f"({total / walls['full run']:.2f} jobs at a time on average)")


if __name__ == "__main__":
    main()
