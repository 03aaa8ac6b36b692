"""Pipeline wall time from a fresh copy, and the no-op rerun time (targets: ≤ 8 min, ≤ 5 s on 2 cores).

    .venv/bin/python benchmarks/bench_pipeline.py [--cores N] [--configfile FILE]

Copies the project (files git would ship) to a temp dir, runs `snakemake --cores N`, then runs it again
(nothing to do) and prints both wall times.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import copy_project, snakemake  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", default="all")
    ap.add_argument("--configfile", action="append", default=[])
    args = ap.parse_args()
    extra = [a for f in args.configfile for a in ("--configfile", str(Path(f).resolve()))]
    with tempfile.TemporaryDirectory() as tmp:
        project = copy_project(Path(tmp))
        for label in ("full run", "no-op rerun"):
            start = time.perf_counter()
            proc = snakemake(project, "--cores", args.cores, *extra, timeout=3600)
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                sys.exit(f"{label} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
            print(f"{label:12s} {wall:8.1f} s")


if __name__ == "__main__":
    main()
