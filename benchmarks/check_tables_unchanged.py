"""Prove a refactor left the deterministic tables alone: run them at a base commit and at the working tree, compare.

    .venv/bin/python benchmarks/check_tables_unchanged.py BASE_REF [--keep DIR] [--only NAME ...]

For each deterministic experiment (chen/*, korthikanti/*, planner paper and frontier), each checkout runs
`remat experiment NAME` with the parameters of its own config/config.yaml (the section the pipeline passes)
and its own src/ on PYTHONPATH. The two CSVs are compared cell by cell with the provenance columns dropped
(host, timestamp, git commit, versions); columns the new code adds are listed, and the old columns compared.
Prints one line per table: identical, or the number of differing rows followed by those rows (base, then new). Exit 1
when any table differs, so the output must be read against the changes the refactor intends (e.g. the rows a changed
segments(k) rule moves).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = {  # experiment name -> config section
    "chen-check": ("chen", "check"), "chen-segments": ("chen", "segments"), "chen-depth": ("chen", "depth"),
    "chen-revolve": ("chen", "revolve"),
    "korthikanti-table2": ("korthikanti", "table2"), "korthikanti-items": ("korthikanti", "items"),
    "korthikanti-flops": ("korthikanti", "flops"), "korthikanti-memory": ("korthikanti", "memory"),
    "korthikanti-modern": ("korthikanti", "modern"),
    "planner-paper": ("planner", "paper"), "planner-frontier": ("planner", "frontier"),
}
PROVENANCE = ["device_name", "torch_version", "numpy_version", "git_commit", "host", "timestamp"]


def run_tables(tree: Path, out: Path, names: list[str]) -> None:
    """Run every experiment of ``names`` with ``tree``'s code and config; write out/NAME.csv."""
    config = yaml.safe_load((tree / "config" / "config.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    for name in names:
        section = config
        for key in EXPERIMENTS[name]:
            section = section.get(key) or {}
        cmd = [sys.executable, "-m", "remat", "experiment", name, "--params", json.dumps(section),
               "--out", str(out / f"{name}.csv")]
        subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True)


def compare(base: Path, new: Path, name: str) -> bool:
    """Print the verdict for one table; True when identical (provenance aside)."""
    a, b = (pd.read_csv(d / f"{name}.csv", dtype=str, keep_default_na=False) for d in (base, new))
    a, b = (f.drop(columns=[c for c in PROVENANCE if c in f.columns]) for f in (a, b))
    removed, added = [c for c in a.columns if c not in b.columns], [c for c in b.columns if c not in a.columns]
    if removed:
        print(f"{name}: columns removed: {removed}")
        return False
    if added:  # new columns (e.g. the settings a row was made with): the old ones must be unchanged
        print(f"{name}: {len(added)} columns added: {', '.join(added)}")
        b = b[list(a.columns)]
    if len(a) != len(b):
        print(f"{name}: {len(a)} rows before, {len(b)} after")
        return False
    differs = (a != b).any(axis=1)
    if not differs.any():
        print(f"{name}: identical ({len(a)} rows)")
        return True
    print(f"{name}: {int(differs.sum())} of {len(a)} rows differ")
    cols = [c for c in a.columns if (a[c] != b[c]).any()]
    keys = [c for c in ("schedule", "model", "technique", "method", "gpu", "sp", "budget_bytes", "k", "layers")
            if c in a.columns and c not in cols]
    for i in a.index[differs]:
        print(f"  row {i} {a.loc[i, keys].to_dict()}: before {a.loc[i, cols].to_dict()} "
              f"after {b.loc[i, cols].to_dict()}")
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="git ref of the code before the change (e.g. main~5)")
    ap.add_argument("--keep", type=Path, help="keep both sets of tables under this folder")
    ap.add_argument("--only", nargs="+", choices=sorted(EXPERIMENTS), help="compare only these")
    ap.add_argument("--compare-only", action="store_true", help="compare the tables already kept under --keep")
    args = ap.parse_args()
    names = args.only or list(EXPERIMENTS)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        base_tree, base_out, new_out = Path(tmp) / "tree", work / "base", work / "new"
        if not args.compare_only:
            _run_both(args.base, base_tree, base_out, new_out, names)
        same = [compare(base_out, new_out, name) for name in names]
    print(f"{sum(same)} of {len(same)} tables identical (provenance columns aside)")
    return 0 if all(same) else 1


def _run_both(base: str, base_tree: Path, base_out: Path, new_out: Path, names: list[str]) -> None:
    base_out.mkdir(parents=True, exist_ok=True)
    new_out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), base],
                   check=True, capture_output=True)
    try:
        run_tables(base_tree, base_out, names)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False)
    run_tables(ROOT, new_out, names)


if __name__ == "__main__":
    sys.exit(main())
