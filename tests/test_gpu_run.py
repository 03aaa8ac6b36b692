"""`make gpu` cannot rot on machines without a GPU: its smoke run (the same code path on the CPU, tiny sizes)
runs every step, and without a CUDA device the real run says so in one line, exit 2, writing nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from remat import gpu_run

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_run_config_equals_the_yaml_configs():
    """config/gpu-run.json (read on the GPU node, which may lack PyYAML) is config.yaml overlaid with gpu.yaml."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    overlay = yaml.safe_load((ROOT / "config" / "gpu.yaml").read_text())
    assert json.loads(gpu_run.CONFIG.read_text()) == gpu_run.merged_config(base, overlay)


def test_budgets_fit_eight_and_two_minutes():
    assert sum(s.seconds for s in gpu_run.STEPS) <= 8 * 60
    assert sum(s.quick_seconds for s in gpu_run.STEPS) <= 2 * 60


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA device")
def test_without_cuda_one_line_exit_2_nothing_written(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "remat.gpu_run", "--results", str(tmp_path / "r"),
                           "--reference", str(tmp_path / "ref")], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "no CUDA device" in proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_smoke_runs_every_step_and_writes_the_reference_copy(tmp_path, monkeypatch):
    """As on a bare GPU node: the experiments' processes cannot import PyYAML, jsonschema, PuLP or Snakemake."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("yaml", "jsonschema", "pulp", "snakemake"):
        (bare / f"{name}.py").write_text(f"raise ImportError('{name} is not installed on this node')\n")
    monkeypatch.setenv("PYTHONPATH", str(bare))
    lines = []
    rows = gpu_run.run(tmp_path / "results", "cpu", smoke=True, log=lines.append)
    steps = {r["experiment"]: r for r in rows}
    assert [r["step"] for r in rows if r["step"] != "tests"] == [
        s.name for s in gpu_run.STEPS for _ in s.experiments]
    failed = {k: r["reason"] for k, r in steps.items() if r["status"] != "ok" and k != "pytest -m gpu"}
    assert not failed, failed
    assert len(lines) == len(rows)
    for row in rows:
        if row["table"]:
            assert len(pd.read_csv(row["table"])) > 0
    folder = gpu_run.save_reference(tmp_path / "results", rows, gpu_run.provenance("cpu"), tmp_path / "ref")
    assert json.loads((folder / "provenance.json").read_text())["device"] == "cpu"
    assert (folder / "sweeps" / "segments" / "cpu.csv").exists() and (folder / "steps.csv").exists()


@pytest.mark.slow
def test_gpu_tests_collect_on_a_bare_node(tmp_path):
    """Step 2 runs `pytest -m gpu` on the modules holding GPU tests; none of them may need PyYAML, jsonschema,
    PuLP or Snakemake to be collected (a bare GPU node has none; collecting every module failed the step)."""
    files = gpu_run.gpu_test_files()
    assert ROOT / "tests" / "test_policies.py" in files and ROOT / "tests" / "test_pipeline.py" not in files
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("yaml", "jsonschema", "pulp", "snakemake"):
        (bare / f"{name}.py").write_text(f"raise ImportError('{name} is not installed on this node')\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p",
                           "no:cacheprovider", *map(str, files)], capture_output=True, text=True, cwd=ROOT,
                          env={**__import__("os").environ, "PYTHONPATH": str(bare)})
    assert proc.returncode == 0, proc.stdout[-2000:]
    collected = dict(line.rsplit(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert {Path(k).name for k in collected} == {f.name for f in files} and all(int(n) > 0 for n in collected.values())
